"""``SandboxConformance``: the standard suite every sandbox backend passes.

Subclass it, set ``backend`` (or override ``make_sandbox``), and pytest runs the whole
protocol against real processes or containers::

    class TestMyBackend(SandboxConformance):
        backend = "docker"

``leftovers(sandbox)`` lists what a closed sandbox left behind (containers, processes,
directories); the suites assert it is empty after every test.

``SuiteConformance`` is the standard suite of a task suite: over every split, the expert solves
every task, and policies that do no work (finish at once, or give one answer stuffed with every
candidate) succeed on none and earn no reward::

    class TestRetailSuite(SuiteConformance):
        suite = "retail"
        stuffed_answer = "It is pending, processed, delivered or cancelled ..."
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import tarfile
from typing import Any, ClassVar

import pytest

from agentsandbox.backends import BACKENDS, available_backends
from agentsandbox.backends.base import Sandbox
from agentsandbox.config import SandboxConfig
from agentsandbox.suites import SPLITS, VERIFIER_ONLY_SPLITS, get_suite
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.env import AgentEnv
from knowlyrcore.registry import make
from knowlyrcore.testing import require

_STATUS: dict[str, tuple[bool, str]] = {}


def backend_status(name: str) -> tuple[bool, str]:
    """Cached ``available_backends()[name]``."""
    if not _STATUS:
        _STATUS.update(available_backends())
    return _STATUS[name]


def require_backend(name: str) -> None:
    """Skip (or fail under ``KNOWLYR_REQUIRE_COMPONENTS=1``) when ``name`` cannot run here."""
    ok, why = backend_status(name)
    require(ok, f"{name} sandbox backend unavailable: {why}")


def leftovers(sandbox: Sandbox) -> list[str]:
    """Containers, processes and directories of a closed ``sandbox`` that still exist."""
    found: list[str] = []
    if sandbox._tmp.exists():
        found.append(f"directory {sandbox._tmp}")
    marker = str(sandbox._tmp).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if marker in handle.read():
                    found.append(f"process {pid}")
        except OSError:
            continue
    container = getattr(sandbox, "_container_id", None)
    if container:
        from agentsandbox.backends.docker import docker_client

        client = docker_client()
        try:
            client.containers.get(container)
            found.append(f"container {container[:12]}")
        except Exception as exc:
            if "No such container" not in str(exc) and "404" not in str(exc):
                raise
        finally:
            client.close()
    return found


class SandboxConformance:
    """Protocol tests for a backend: commands, persistence, files, reset, limits, cleanup."""

    backend: ClassVar[str] = ""
    config: ClassVar[SandboxConfig] = SandboxConfig(timeout=20, max_output_bytes=4096, overflow_bytes=1 << 20)

    def make_sandbox(self) -> Sandbox:
        require_backend(self.backend)
        return BACKENDS[self.backend](self.config)

    @pytest.fixture
    def sandbox(self):
        sandbox = self.make_sandbox()
        try:
            sandbox.start()
            yield sandbox
        finally:
            sandbox.close()
        left = leftovers(sandbox)
        assert not left, f"left behind: {left}"

    def test_run_returns_output_and_exit_code(self, sandbox):
        ok = sandbox.run("echo hello")
        assert (ok.output, ok.exit_code, ok.error) == ("hello\n", 0, None)
        bad = sandbox.run("echo oops >&2; exit_code=3; (exit $exit_code)")
        assert (bad.output, bad.exit_code) == ("oops\n", 3)

    def test_cwd_and_environment_persist_between_commands(self, sandbox):
        sandbox.run("mkdir -p sub && cd sub && export GREETING=hi && alias ll=ls")
        result = sandbox.run("echo $GREETING $PWD")
        assert result.output == f"hi {sandbox.config.workdir}/sub\n"
        assert result.metadata["cwd"] == f"{sandbox.config.workdir}/sub"

    def test_run_argv_is_never_parsed_by_a_shell(self, sandbox):
        hostile = "$(touch pwned); touch pwned2 `touch pwned3` && echo *"
        result = sandbox.run_argv(["printf", "%s", hostile])
        assert result.output == hostile
        assert sandbox.run("ls").output == ""

    def test_command_reading_stdin_gets_eof(self, sandbox):
        result = sandbox.run("cat; read line; echo after=$?")
        assert result.output == "after=1\n"

    def test_unicode_and_missing_trailing_newline(self, sandbox):
        assert sandbox.run("printf 'héllo ✓'").output == "héllo ✓"

    def test_files_round_trip_between_host_api_and_shell(self, sandbox):
        sandbox.write_file("pkg/mod.py", "x = 1\n")
        assert sandbox.run("cat pkg/mod.py").output == "x = 1\n"
        sandbox.run("echo made-inside > inside.txt && chmod +x inside.txt")
        assert sandbox.read_file("inside.txt") == b"made-inside\n"
        assert sandbox.read_file(f"{sandbox.config.workdir}/pkg/mod.py") == b"x = 1\n"
        sandbox.write_file("pkg/mod.py", "x = 2\n")
        assert sandbox.run("cat pkg/mod.py && echo more >> pkg/mod.py").exit_code == 0

    def test_upload_and_download_directories(self, sandbox, tmp_path):
        src = tmp_path / "src"
        (src / "a" / "b").mkdir(parents=True)
        (src / "a" / "b" / "deep.txt").write_text("deep")
        (src / "top.sh").write_text("echo top")
        (src / "top.sh").chmod(0o755)
        assert sandbox.upload(src, "up") == 2
        assert sandbox.run("./up/top.sh && cat up/a/b/deep.txt").output == "top\ndeep"
        sandbox.run("echo new > up/a/new.txt")
        out = tmp_path / "out"
        assert sandbox.download("up", out) == 3
        assert (out / "a" / "new.txt").read_text() == "new\n"
        assert os.access(out / "top.sh", os.X_OK)

    def test_load_archive_and_reset_restores_initial_state(self, sandbox, tmp_path):
        archive = tmp_path / "repo.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            data = b"print('v1')\n"
            info = tarfile.TarInfo("project/app.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        sandbox.load(archive)
        assert sandbox.run("cat app.py").output == "print('v1')\n"
        sandbox.run("echo broken > app.py; touch extra; mkdir d; cd d; export LEFT=1; sleep 300 &")
        sandbox.reset()
        assert sandbox.run("ls").output == "app.py\n"
        assert sandbox.run("echo cwd=$PWD left=$LEFT").output == f"cwd={sandbox.config.workdir} left=\n"
        assert sandbox.read_file("app.py") == b"print('v1')\n"
        assert sandbox.run("pgrep -f 'sleep 300'").exit_code == 1

    def test_snapshot_after_setup_is_what_reset_restores(self, sandbox):
        sandbox.run("echo configured > setup.txt")
        sandbox.snapshot()
        sandbox.run("rm setup.txt")
        sandbox.reset()
        assert sandbox.read_file("setup.txt") == b"configured\n"

    def test_timeout_kills_the_command_and_keeps_the_directory(self, sandbox):
        sandbox.run("mkdir -p work && cd work")
        result = sandbox.run("sleep 30; echo never", timeout=0.5)
        assert result.exit_code == 124 and "timed out" in result.error
        assert "never" not in result.output
        follow = sandbox.run("pwd; pgrep -f 'sleep 30' || echo none")
        assert follow.output == f"{sandbox.config.workdir}/work\nnone\n"

    def test_output_is_capped_and_marked_truncated(self, sandbox):
        result = sandbox.run("head -c 100000 /dev/zero | tr '\\0' a")
        assert result.exit_code == 0 and result.truncated
        assert len(result.output) == sandbox.config.max_output_bytes

    def test_no_network_interface_but_loopback(self, sandbox):
        interfaces = sandbox.run("tail -n +3 /proc/net/dev | cut -d: -f1").output.split()
        assert interfaces == ["lo"]

    def test_shell_exit_is_reported_and_a_new_shell_started(self, sandbox):
        result = sandbox.run("exit 7")
        assert result.exit_code is None and "shell exited" in result.error
        assert sandbox.run("echo back").output == "back\n"

    def test_close_is_idempotent_and_cleans_up(self):
        sandbox = self.make_sandbox()
        sandbox.close()  # never started
        sandbox = self.make_sandbox()
        sandbox.run("sleep 300 &")
        sandbox.close()
        sandbox.close()
        left = leftovers(sandbox)
        assert not left, f"left behind: {left}"

    # -- hostile agents: what an RL policy searching for reward will try ------------------
    # The policy is untrusted code. These cases make a failing test look like a pass (forged
    # framing, state planted for later runs, edited tests) or take the timeout into its own
    # hands; every backend must refuse them.

    FAILING_TASK: ClassVar[dict] = {
        "id": "hostile",
        "description": "the test fails unless check.py is fixed",
        "metadata": {
            "files": {"check.py": "import sys\nsys.exit(1)\n", "test_check.py": "import check\n"},
            "protected_paths": ["test_check.py"],
        },
        "test_command": "python3 test_check.py && echo '3 passed'",
    }

    #: A background job that, whenever a test process starts, prints a passing summary and a
    #: reply sentinel for every value it can find in any process environment (the old shell
    #: kept its framing token in $KNOWLYR_TOKEN, visible to every child).
    FORGER = (
        "nohup bash -c 'while :; do "
        'if pgrep -f "python3 test_chec[k]" >/dev/null; then printf "3 passed\\n"; '
        'for t in "$KNOWLYR_TOKEN" $(cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n" | sed -n "s/^[A-Z_]*=//p"); do '
        'printf "\\n\\0%s:0:/workspace\\0" "$t"; done; '
        # one burst per test process (its output must not overflow the probe's cap)
        'while pgrep -f "python3 test_chec[k]" >/dev/null; do sleep 0.01; done; fi; sleep 0.01; done\' >/dev/null 2>&1 &'
    )

    def _env(self, sandbox, **overrides):
        from agentsandbox.env import SandboxEnv

        return SandboxEnv(sandbox=sandbox, **overrides)

    def test_hostile_background_job_cannot_forge_a_test_pass(self, sandbox):
        env = self._env(sandbox)
        env.reset(task=self.FAILING_TASK)
        env.step({"tool": "bash", "params": {"command": self.FORGER.replace(">/dev/null 2>&1 &", "&")}})
        # the forger's lines cannot end an ordinary command early with a forged exit code
        probe = env.step({"tool": "bash", "params": {"command": "python3 test_check.py; echo real; (exit 4)"}})
        assert probe.info["exit_code"] == 4
        done = env.step({"tool": "submit", "params": {}})
        assert done.info["success"] is False and done.reward == 0.0
        assert "3 passed" not in done.info["tests"]["output"]

    def test_hostile_edited_or_deleted_tests_are_restored_before_grading(self, sandbox):
        env = self._env(sandbox)
        for attack in ("echo 'print(1)' > test_check.py", "rm test_check.py && touch test_check.py"):
            env.reset(task=self.FAILING_TASK)
            env.step({"tool": "bash", "params": {"command": attack}})
            assert env.step({"tool": "submit", "params": {}}).info["success"] is False
        env.reset(task=self.FAILING_TASK)  # the honest fix still passes
        env.step({"tool": "write_file", "params": {"path": "check.py", "content": "ok = True\n"}})
        assert env.step({"tool": "submit", "params": {}}).info["success"] is True

    PLANT = (
        "site=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p \"$site\" && "
        "echo 'import os; os._exit(0)' > \"$site/zz_evil.pth\" && "
        "printf '[core]\\n\\tfsmonitor = touch /workspace/fsmonitor-ran; false\\n' > ~/.gitconfig && "
        "echo planted > /tmp/planted && (echo planted > /dev/shm/planted || true)"
    )

    def test_hostile_user_site_and_git_config_do_not_reach_grading(self, sandbox):
        env = self._env(sandbox)
        env.reset(task=self.FAILING_TASK)
        planted = env.step({"tool": "bash", "params": {"command": self.PLANT + " && python3 -c 'print(1)'; echo $?"}})
        assert planted.observation.strip().endswith("0")  # the .pth is live in the agent's own shell
        done = env.step({"tool": "submit", "params": {}})
        assert done.info["success"] is False

    def test_hostile_state_does_not_survive_reset(self, sandbox):
        sandbox.run(self.PLANT)
        sandbox.reset()
        after = sandbox.run(
            "python3 -c 'print(\"python-ok\")'; ls -A /tmp /var/tmp /dev/shm 2>/dev/null | grep -v ':$' | grep . "
            "|| echo scratch-empty; git init -q . 2>/dev/null; git status >/dev/null 2>&1; ls fsmonitor-ran 2>&1"
        )
        assert "python-ok" in after.output and "scratch-empty" in after.output, after.output
        assert "No such file" in after.output

    def test_hostile_timeout_is_clamped_and_validated(self, sandbox):
        import dataclasses

        sandbox.config = dataclasses.replace(sandbox.config, timeout=1)  # as make(..., timeout=1) sets it
        env = self._env(sandbox)
        env.reset(task={"description": "wait", "test_command": "true"})
        slow = env.step({"tool": "bash", "params": {"command": "sleep 30; echo never", "timeout": 1e9}})
        assert slow.info["exit_code"] == 124 and "never" not in slow.observation
        assert "after 1s" in slow.info["error"]
        # 1e308 and inf: once an OverflowError that desynchronised the shell; a JSON integer too
        # large for a float (json.loads gives a 401-digit int) raised OverflowError out of step
        for huge in (1e308, float("inf"), json.loads("1" + "0" * 400)):
            ts = env.step({"tool": "bash", "params": {"command": "echo fine", "timeout": huge}})
            assert ts.observation.strip() == "fine" and ts.info["exit_code"] == 0
        for bad in (float("nan"), -5, 0, "soon"):
            ts = env.step({"tool": "bash", "params": {"command": "echo bad", "timeout": bad}})
            assert ts.info["error"] and "bad" not in ts.observation.split("[error]")[0], (bad, ts.observation)
        for word in ("first", "second"):
            ts = env.step({"tool": "bash", "params": {"command": f"echo {word}"}})
            assert ts.observation.strip() == word

    def test_hostile_line_numbers_are_validated(self, sandbox):
        env = self._env(sandbox)
        env.reset(task={"description": "read", "metadata": {"files": {"f.txt": "one\ntwo\nthree\n"}}})
        huge = json.loads("1" + "0" * 400)

        def read(**lines):
            return env.step({"tool": "read_file", "params": {"path": "f.txt", **lines}})

        # JSON Schema's "integer" admits 2.0: it once raised TypeError out of step (slice indices)
        assert read(start_line=2.0, end_line=2.0).observation == "two\n"
        assert read(start_line=2, end_line=huge).observation == "two\nthree\n"  # past the end: to the end
        for bad in ({"start_line": huge}, {"start_line": 1.5}, {"start_line": 1, "end_line": float("nan")}):
            ts = read(**bad)
            assert ts.info["error"] and ts.observation.startswith("[error]"), (bad, ts.observation)
        assert "about 401 digits" in read(start_line=huge).info["error"]  # not the 401 digits themselves

    def test_hostile_download_never_writes_through_symlinks(self, sandbox, tmp_path):
        host_dir = tmp_path / "host"
        host_dir.mkdir()
        dest = tmp_path / "dest"
        sandbox.run(f"mkdir -p out && ln -s {host_dir} out/a && ln -s {host_dir}/x out/b")
        sandbox.download("out", dest)
        assert (dest / "a").is_symlink()
        sandbox.run("cd out && rm a b && mkdir a && echo evil > a/f && echo evil > b")
        sandbox.download("out", dest)
        assert list(host_dir.iterdir()) == []
        assert (dest / "a" / "f").read_text() == "evil\n" and not (dest / "a").is_symlink()
        assert (dest / "b").read_text() == "evil\n" and not (dest / "b").is_symlink()


class SuiteConformance:
    """Standard checks of a task suite over every split, in every reward mode of its env.

    Set ``suite`` (its registered name); ``stuffed_answer`` is one constant answer naming every
    candidate of the domain (every status, reason, count ...), which no answer check may accept;
    ``env_variants`` are the env's keyword arguments per reward mode to check.
    """

    suite: ClassVar[str] = ""
    tasks_per_split: ClassVar[int] = 120
    seed: ClassVar[int] = 0
    stuffed_answer: ClassVar[str] = ""
    env_variants: ClassVar[list[dict[str, Any]]] = [{}]

    def make_env(self, **overrides: Any) -> AgentEnv:
        suite = get_suite(self.suite)
        return make(suite.env_id, **{**suite.env_kwargs, **overrides})

    def _suite_with(self, split: str) -> Any:
        """The suite, or a skip when it has no ``split`` (the verifier-only splits of a suite without roles)."""
        suite = get_suite(self.suite)
        if split not in suite.splits:
            pytest.skip(f"suite {self.suite!r} has no {split!r} split")
        return suite

    def no_work_actions(self) -> dict[str, dict[str, Any]]:
        """Each terminal tool of the env's domain played at once: with empty text (doing nothing),
        and with ``stuffed_answer`` in its first required text parameter."""
        suite = get_suite(self.suite)
        env = self.make_env()
        try:  # an env whose tools come with the task (knowlyr/mcp, knowlyr/bfcl) names its domain at reset
            env.reset(task=suite.generate(suite.splits[0], 1, self.seed)[0])
            profile = get_domain_profile(env.domain)
        finally:
            env.close()
        actions = {}
        for tool in profile.terminal_tools:
            schema = profile.get_tool(tool).parameters
            texts = [p for p in schema.get("required", []) if schema["properties"][p].get("type") == "string"]
            actions[f"{tool} at once"] = {"tool": tool, "params": dict.fromkeys(texts, "")}
            if texts and self.stuffed_answer:
                actions[f"{tool} stuffed"] = {
                    "tool": tool,
                    "params": {**dict.fromkeys(texts, ""), texts[0]: self.stuffed_answer},
                }
        return actions

    @pytest.mark.parametrize("split", SPLITS + VERIFIER_ONLY_SPLITS)
    def test_expert_solves_every_task(self, split):
        suite = self._suite_with(split)
        for overrides in self.env_variants:
            env = self.make_env(**overrides)
            for task in suite.generate(split, self.tasks_per_split, self.seed):
                task = json.loads(json.dumps(task))  # tasks survive a JSONL round trip
                expert = suite.expert()
                expert.reset(task)
                ts, total = env.reset(task=task), 0.0
                for _ in range(task.get("max_steps") or suite.max_steps):
                    ts = env.step(expert(ts.observation))
                    total += ts.reward
                    assert not ts.info.get("error"), (overrides, task["id"], ts.observation)
                    if ts.done:
                        break
                assert ts.info.get("success") is True and total == pytest.approx(1.0), (overrides, task["id"])
            env.close()

    @pytest.mark.parametrize("split", SPLITS + VERIFIER_ONLY_SPLITS)
    def test_no_work_policies_succeed_nowhere_and_earn_nothing(self, split):
        tasks = self._suite_with(split).generate(split, self.tasks_per_split, self.seed)
        actions = self.no_work_actions()
        gained: dict[str, list[str]] = {}
        for overrides in self.env_variants:
            env = self.make_env(**overrides)
            for task in tasks:
                for name, action in actions.items():
                    env.reset(task=task)
                    ts = env.step(action)
                    assert ts.done, (name, "did not end the episode:", ts.observation)
                    if ts.info.get("success") or ts.reward > 0:
                        template = task.get("metadata", {}).get("template", task["id"])
                        gained.setdefault(f"{name} {overrides}", []).append(f"{template}: {ts.reward:g}")
            env.close()
        assert not gained, gained


@functools.cache
def _mcp_server_problem(command: str) -> str:
    """Why ``command`` cannot serve as a sandboxed MCP server here ('' when it can): no
    bubblewrap, not installed (PATH, then ``$KNOWLYR_MCP_PATH``), or it does not start."""
    from agentsandbox.backends.local import bwrap_status
    from agentsandbox.mcp import MCP_PATH_ENV, list_server_tools
    from knowlyrcore.errors import InfrastructureError

    ok, why = bwrap_status()
    if not ok:
        return why
    name = command.split()[0]
    if not (shutil.which(name) or shutil.which(name, path=os.environ.get(MCP_PATH_ENV, ""))):
        return f"{name} not found on PATH or ${MCP_PATH_ENV} (make mcp-servers installs the ones the tests use)"
    try:
        list_server_tools(server=command)
    except InfrastructureError as exc:
        return str(exc)
    return ""


def require_mcp_server(command: str) -> None:
    """Skip the calling test (fail it under ``KNOWLYR_REQUIRE_COMPONENTS``) when the MCP server
    ``command`` cannot run here in bubblewrap (``{workspace}`` in it is fine: it lists its tools
    on an empty workspace)."""
    problem = _mcp_server_problem(command)
    require(not problem, problem)
