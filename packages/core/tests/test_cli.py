import json
import subprocess
import sys

import pytest

from knowlyrcore import register
from knowlyrcore.cli import main
from knowlyrcore.registry import builtin_envs_hint

pytestmark = pytest.mark.usefixtures("clean_registry")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_domains_lists_all_seven(capsys, monkeypatch):
    from knowlyrcore import domain as domain_module

    # other packages register their domains on import (knowlyr-sandbox: retail); set them aside
    monkeypatch.setattr(domain_module, "_CUSTOM_PROFILES", {})
    code, out, _ = run(capsys, "domains")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [
        "advisory",
        "browser",
        "coding",
        "conversation",
        "discussion",
        "engineering",
        "generic",
    ]


def test_domain_show(capsys):
    code, out, _ = run(capsys, "domain", "show", "coding")
    assert code == 0
    assert "terminal tools: submit, finish" in out
    assert "read_file(path: string, start_line?: integer, end_line?: integer)" in out


def test_domain_show_json(capsys):
    _, out, _ = run(capsys, "domain", "show", "browser", "--json")
    assert json.loads(out)["name"] == "browser"


def test_unknown_domain_is_a_one_line_error(capsys):
    code, out, err = run(capsys, "domain", "show", "astrology")
    assert code == 2 and out == ""
    assert err.startswith("error: unknown domain 'astrology'") and err.count("\n") == 1


def test_envs_and_check(capsys, counter_cls):
    register("cli/counter", counter_cls, domain="generic")
    code, out, _ = run(capsys, "envs")
    assert code == 0 and "cli/counter" in out
    code, out, _ = run(capsys, "check", "cli/counter")
    assert code == 0 and "cli/counter: OK" in out


def test_check_reports_violations(capsys):
    from knowlyrcore import AgentEnv, TimeStep

    class Broken(AgentEnv):
        def reset(self, *, task=None, seed=None):
            return TimeStep("x")

        def step(self, action):
            return None

    register("cli/broken", Broken)
    code, _, err = run(capsys, "check", "cli/broken")
    assert code == 1 and "step 0 must return a TimeStep" in err


def test_check_unknown_env(capsys):
    code, _, err = run(capsys, "check", "nope/nope")
    assert code == 2 and "unknown environment 'nope/nope'" in err
    assert "./packages/sandbox" not in err  # not a built-in id


def test_without_the_builtin_envs_envs_and_check_name_the_same_install(capsys):
    """With no package providing the knowlyr/* environments (an empty registry, discovery done),
    `envs` and `check knowlyr/...` give the same hint."""
    from knowlyrcore import registry

    registry._REGISTRY.clear()
    registry._PLUGINS_LOADED = True
    hint = builtin_envs_hint()
    assert "pip install ./packages/sandbox" in hint and "knowlyr/* environments" in hint
    code, out, _ = run(capsys, "envs")
    assert (code, out) == (0, f"no environments registered ({hint})\n")
    code, out, err = run(capsys, "check", "knowlyr/sandbox")
    assert (code, out) == (2, "")
    assert err == f"error: unknown environment 'knowlyr/sandbox' (registered: none; {hint})\n"


def test_check_of_a_builtin_typo_suggests_instead_of_installing(capsys, counter_cls):
    """Once some knowlyr/* environment is registered, an unknown one is a typo, not a missing package."""
    from knowlyrcore import registry

    registry._REGISTRY.clear()
    registry._PLUGINS_LOADED = True
    register("knowlyr/counter", counter_cls)
    code, _, err = run(capsys, "check", "knowlyr/countr")
    assert code == 2
    assert (
        err
        == "error: unknown environment 'knowlyr/countr'; did you mean 'knowlyr/counter'? (registered: knowlyr/counter)\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "{missing}"],
        ["domain", "show", "{missing}.yaml"],
        ["tools", "search", "{missing}", "refund"],
        ["tools", "index", "{missing}", "-o", "{out}"],
        ["tools", "index", "--from-data", "{missing}", "-o", "{out}"],
    ],
)
def test_a_missing_input_file_is_one_line_worded_as_everywhere(capsys, tmp_path, args):
    names = {"missing": tmp_path / "missing.jsonl", "out": tmp_path / "out.jsonl"}
    argv = [a.format(**names) for a in args]
    code, out, err = run(capsys, *argv)
    missing = next(a for a in argv if "missing" in a)
    assert (code, out, err) == (2, "", f"error: {missing}: no such file or directory\n")
    assert not names["out"].exists()


def test_schema_trajectory_is_json_schema(capsys):
    code, out, _ = run(capsys, "schema", "trajectory")
    schema = json.loads(out)
    assert code == 0 and schema["title"] == "Trajectory" and "steps" in schema["properties"]


def test_validate(capsys, tmp_path):
    from knowlyrcore import Trajectory, write_trajectories

    good = tmp_path / "good.jsonl"
    write_trajectories(good, [Trajectory(id="1"), Trajectory(id="2")])
    code, out, _ = run(capsys, "validate", str(good))
    assert code == 0 and out.strip() == f"{good}: 2 valid trajectories"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"steps": 1}\n')
    code, _, err = run(capsys, "validate", str(bad))
    assert code == 2 and f"{bad}:1: steps:" in err


def test_console_script_help():
    out = subprocess.run(
        [sys.executable, "-m", "knowlyrcore.cli", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("envs", "domains", "domain", "check", "schema", "validate"):
        assert command in out.stdout


def test_tools_index_and_search(tmp_path, capsys):
    import json as _json

    from knowlyrcore.cli import main

    mcp_listing = tmp_path / "mcp.json"
    mcp_listing.write_text(
        _json.dumps(
            {
                "tools": [
                    {"name": "read_file", "description": "Read a file from disk", "inputSchema": {"type": "object"}}
                ]
            }
        )
    )
    assert main(["tools", "index", "generated", str(mcp_listing), "-o", str(tmp_path / "lib.jsonl")]) == 0
    assert "1241 tools" in capsys.readouterr().err
    assert main(["tools", "search", str(tmp_path / "lib.jsonl"), "read the file config.yaml", "-k", "2"]) == 0
    first = _json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["tool"] == "read_file"
    assert main(["tools", "index", str(mcp_listing), str(mcp_listing), "-o", str(tmp_path / "dup.jsonl")]) == 2
    assert "read_file' is in the library twice" in capsys.readouterr().err
    assert not (tmp_path / "dup.jsonl").exists()
