import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest

from knowlyrcore import RegistryError, TimeStep, list_envs, make, register, spec, unregister
from knowlyrcore import registry as registry_module
from knowlyrcore.wrappers import MaxStepsWrapper

pytestmark = pytest.mark.usefixtures("clean_registry")


def test_register_and_make_with_defaults_and_overrides(counter_cls):
    register("test/counter", counter_cls, domain="generic", target=5)
    env = make("test/counter")
    assert isinstance(env, counter_cls) and env.target == 5
    assert make("test/counter", target=7).target == 7
    assert env.spec.id == "test/counter"


def test_registered_domain_applies_to_generic_classes(counter_cls):
    register("test/counter-coding", counter_cls, domain="coding")
    assert make("test/counter-coding").domain == "coding"


def test_max_steps_wraps(counter_cls):
    register("test/short", counter_cls, max_steps=3)
    env = make("test/short")
    assert isinstance(env, MaxStepsWrapper) and env.max_steps == 3
    assert isinstance(make("test/short", max_steps=9), MaxStepsWrapper)


def test_list_and_filter_by_domain(counter_cls):
    register("test/a", counter_cls, domain="coding")
    register("test/b", counter_cls, domain="browser")
    assert {"test/a", "test/b"} <= set(list_envs())
    assert "test/a" in list_envs(domain="coding") and "test/b" not in list_envs(domain="coding")


def test_unknown_id_suggests_close_matches(counter_cls):
    register("test/counter", counter_cls)
    with pytest.raises(RegistryError, match="did you mean 'test/counter'"):
        make("test/countr")


@pytest.mark.parametrize("bad", ["", "has space", "trailing/", "/leading", 3])
def test_invalid_ids_are_rejected(counter_cls, bad):
    with pytest.raises(RegistryError, match="invalid environment id"):
        register(bad, counter_cls)


def test_reregistering_warns_and_replaces(counter_cls):
    register("test/dup", counter_cls, target=1)
    with pytest.warns(UserWarning, match="already registered"):
        register("test/dup", counter_cls, target=2)
    assert make("test/dup").target == 2


def test_constructor_errors_name_the_env(counter_cls):
    register("test/counter", counter_cls)
    with pytest.raises(RegistryError, match="test/counter.*constructor rejected"):
        make("test/counter", colour="red")


def test_factory_must_return_an_env():
    register("test/not-env", lambda: "nope")
    with pytest.raises(RegistryError, match="not an AgentEnv"):
        make("test/not-env")


def test_string_entry_point_is_imported_lazily(tmp_path, monkeypatch):
    module = tmp_path / "lazy_env_mod.py"
    module.write_text(
        textwrap.dedent("""
        from knowlyrcore import AgentEnv, TimeStep
        class LazyEnv(AgentEnv):
            domain = "browser"
            def reset(self, *, task=None, seed=None): return TimeStep("lazy")
            def step(self, action): return TimeStep("x", terminated=True)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    register("test/lazy", "lazy_env_mod:LazyEnv")
    assert "lazy_env_mod" not in sys.modules
    assert spec("test/lazy").resolved_domain() == "browser"
    assert make("test/lazy").reset().observation == "lazy"


def test_broken_entry_point_raises_with_its_name():
    register("test/broken", "no_such_module_xyz:Env")
    with pytest.raises(RegistryError, match="cannot load entry point 'no_such_module_xyz:Env'"):
        make("test/broken")


def test_entry_point_plugins_are_discovered_without_import(monkeypatch):
    eps = [EntryPoint(name="plugin/env", value="plugin_mod_not_imported:Env", group=registry_module.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: eps)
    monkeypatch.setattr(registry_module, "_PLUGINS_LOADED", False)
    assert "plugin/env" in list_envs()
    assert "plugin_mod_not_imported" not in sys.modules
    with pytest.raises(RegistryError, match="plugin/env"):
        make("plugin/env")


def test_invalid_plugin_id_is_an_error_not_silence(monkeypatch):
    eps = [EntryPoint(name="bad id", value="m:Env", group=registry_module.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry_module, "entry_points", lambda group: eps)
    monkeypatch.setattr(registry_module, "_PLUGINS_LOADED", False)
    with pytest.raises(RegistryError, match="not a valid environment id"):
        list_envs()


def test_unregister(counter_cls):
    register("test/gone", counter_cls)
    unregister("test/gone")
    with pytest.raises(RegistryError):
        spec("test/gone")
    with pytest.raises(RegistryError, match="not registered"):
        unregister("test/gone")


def test_timestep_import_is_public():
    assert TimeStep().done is False


def test_plugin_discovery_is_thread_safe(monkeypatch):
    """Threads racing into the first make() all see the installed plugins."""
    import threading
    import time

    def slow_entry_points(group):
        time.sleep(0.05)  # widen the window in which a second thread could see a half-filled registry
        return [EntryPoint(name="plugin/slow", value="m:Env", group=group)]

    monkeypatch.setattr(registry_module, "entry_points", slow_entry_points)
    monkeypatch.setattr(registry_module, "_PLUGINS_LOADED", False)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append("plugin/slow" in list_envs())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [True] * 8
