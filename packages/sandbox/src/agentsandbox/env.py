"""``SandboxEnv`` (``knowlyr/sandbox``): a coding task executed for real in a sandbox.

``reset(task=...)`` puts the task's repository (a local directory, an archive, or a git URL
cloned on the host) into the workspace, checks out ``base_commit``, writes the task's inline
files (``metadata["files"]``: relative path -> text, so a task record can carry its whole
repository), runs ``setup_commands`` and snapshots the result; resetting again to the same
task restores that snapshot in a few milliseconds instead of redoing the setup. The agent
acts with the coding domain's tools (see ``tools.py``); ``submit`` / ``finish`` end the
episode, after which the task's test command decides the outcome and the workspace diff
becomes the trajectory's patch.

Example:
    >>> from knowlyrcore import make
    >>> env = make("knowlyr/sandbox", backend="local")  # doctest: +SKIP
    >>> env.reset(task={"description": "say hi", "test_command": "test -f hi.txt"})  # doctest: +SKIP
    >>> env.step({"tool": "write_file", "params": {"path": "hi.txt", "content": "hi"}})  # doctest: +SKIP
    >>> env.step({"tool": "submit", "params": {}}).info["success"]  # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from agentsandbox.backends import make_sandbox
from agentsandbox.backends.base import Sandbox, SandboxError
from agentsandbox.config import SandboxConfig
from agentsandbox.envkit import episode_over, error_step
from agentsandbox.tools import SANDBOX_TOOLS, call_tool, diff, run_tests
from knowlyrcore.actions import parse_action
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.env import AgentEnv
from knowlyrcore.errors import InvalidActionError
from knowlyrcore.models import TaskInfo, ToolResult
from knowlyrcore.timestep import TimeStep

#: Seconds each setup command may take.
SETUP_TIMEOUT = 600.0


def timestep_for(result: ToolResult, tool: str, **info: Any) -> TimeStep:
    """The TimeStep of a non-terminal tool call: observation text plus machine-readable info."""
    details = {"tool": tool, "exit_code": result.exit_code, "error": result.error, "truncated": result.truncated}
    details.update(result.metadata)
    details.update(info)
    return TimeStep(observation=result.to_observation(), info=details)


class TaskFilesError(SandboxError, ValueError):
    """A task's ``metadata["files"]`` is not a mapping of safe relative paths to text."""


def inline_files(task: TaskInfo) -> dict[str, str]:
    """The task's ``metadata["files"]``, checked: relative paths inside the workspace -> text.

    Task records come from files anyone can write, so a name that is absolute, climbs with
    ``..`` or is otherwise not a plain relative path is refused before anything is written.
    """
    files = task.metadata.get("files")
    if files is None:
        return {}
    where = f"task {task.id!r}: metadata.files" if task.id else "metadata.files"
    if not isinstance(files, dict):
        raise TaskFilesError(f"{where} must map relative paths to file contents, got {type(files).__name__}")
    for path, content in files.items():
        _check_relative(path, where)
        if not isinstance(content, str):
            raise TaskFilesError(f"{where}: the content of {path!r} must be text, got {type(content).__name__}")
    return files


def protected_paths(task: TaskInfo) -> list[str]:
    """The task's ``metadata["protected_paths"]``: workspace files restored before grading.

    A task lists its test files here so the final test run sees them as the task wrote them:
    an agent that edits or deletes a test cannot make it pass.
    """
    paths = task.metadata.get("protected_paths") or []
    where = f"task {task.id!r}: metadata.protected_paths" if task.id else "metadata.protected_paths"
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise TaskFilesError(f"{where} must be a list of relative paths")
    for path in paths:
        _check_relative(path, where)
    return paths


def _check_relative(path: object, where: str) -> None:
    parts = path.split("/") if isinstance(path, str) else []
    if not parts or path.startswith("/") or "\\" in path or "\x00" in path or any(p in ("", ".", "..") for p in parts):
        raise TaskFilesError(
            f"{where}: unsafe file name {path!r}; use a relative path inside the workspace "
            "(no leading '/', no '..', '.' or empty components)"
        )


#: Transports a task's repository URL may use (``GIT_ALLOW_PROTOCOL``). Not ``file``, ``ext``
#: or ``fd``: a task record must not make the host run a program or read a host repository
#: through a URL (a local path is checked like any path).
REPO_PROTOCOLS = ("https", "http", "ssh", "git")


def fetch_repo(repo: str) -> str:
    """A host path for ``repo``: local paths as they are, git URLs cloned into a private cache."""
    if "::" in repo or repo.startswith("-"):
        raise SandboxError(f"task repository {repo!r}: transport helpers and options are not allowed")
    if "://" not in repo and not repo.startswith("git@"):
        if not os.path.exists(repo):
            raise SandboxError(f"task repository {repo!r} does not exist")
        return repo
    scheme = repo.split("://", 1)[0].lower() if "://" in repo else "ssh"
    if scheme not in REPO_PROTOCOLS:
        raise SandboxError(
            f"task repository {repo!r}: scheme {scheme!r} is not allowed (use {', '.join(REPO_PROTOCOLS)})"
        )
    # Per-user and private: a shared /tmp/knowlyr-repos could be pre-filled by another user.
    root = Path(tempfile.gettempdir()) / f"knowlyr-repos-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(root)
    if not os.path.isdir(root) or os.path.islink(root) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise SandboxError(f"repository cache {root} is not a private directory of this user")
    cache = root / hashlib.sha256(repo.encode()).hexdigest()[:16]
    if not cache.exists():
        tmp = cache.with_suffix(f".partial-{os.getpid()}")
        env = {**os.environ, "GIT_ALLOW_PROTOCOL": ":".join(REPO_PROTOCOLS), "GIT_TERMINAL_PROMPT": "0"}
        done = subprocess.run(
            ["git", "clone", "--quiet", "--no-recurse-submodules", "--", repo, str(tmp)],
            capture_output=True,
            text=True,
            env=env,
        )
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SandboxError(f"cannot clone {repo}: {done.stderr.strip()[-500:]}")
        try:
            os.rename(tmp, cache)
        except OSError:  # another process finished the same clone first
            shutil.rmtree(tmp, ignore_errors=True)
    return str(cache)


class SandboxEnv(AgentEnv):
    """Coding environment on a Docker or local sandbox (``backend="auto"`` picks what works)."""

    domain = "coding"

    def __init__(
        self,
        backend: str = "auto",
        config: SandboxConfig | None = None,
        *,
        sandbox: Sandbox | None = None,
        domain: str | None = None,
        **config_overrides: Any,
    ):
        if domain is not None:
            self.domain = domain
        self.backend = backend
        self.config = config or SandboxConfig()
        if config_overrides:
            from dataclasses import replace

            self.config = replace(self.config, **config_overrides)
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._task: TaskInfo | None = None
        self._loaded_key: str | None = None
        self._done = False
        self.profile = get_domain_profile(self.domain)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox, created on first use."""
        if self._sandbox is None:
            self._sandbox = make_sandbox(self.backend, self.config)
        return self._sandbox

    @property
    def task(self) -> TaskInfo | None:
        return self._task

    def reset(self, *, task: TaskInfo | dict | str | None = None, seed: int | None = None) -> TimeStep:
        self._task = TaskInfo.coerce(task)
        self._done = False
        files = inline_files(self._task)
        protected_paths(self._task)  # refuse a bad list now, not at the end of the episode
        files_hash = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest() if files else None
        key = json.dumps([self._task.repo, self._task.base_commit, files_hash, self._task.setup_commands])
        if key == self._loaded_key:
            self.sandbox.reset()
        else:
            self._prepare(self._task, files)
            self._loaded_key = key
        count = 0
        for _, dirs, names in os.walk(self.sandbox.host_workspace):
            dirs[:] = [d for d in dirs if d != ".git"]
            count += len(names)
        lines = [
            self._task.description or "(no task description)",
            "",
            f"Workspace: {self.config.workdir} ({count} files)",
        ]
        if self._task.test_command:
            lines.append(f"Tests: {self._task.test_command}")
        lines.append(f"Tools: {', '.join(self.available_tools)}")
        return TimeStep(observation="\n".join(lines), info={"task_id": self._task.id, "backend": self.sandbox.backend})

    def _prepare(self, task: TaskInfo, files: dict[str, str]) -> None:
        sandbox = self.sandbox
        self._loaded_key = None
        sandbox.load(fetch_repo(task.repo) if task.repo else None)
        if task.base_commit:
            checkout = sandbox.run_argv(["git", "checkout", "--quiet", task.base_commit])
            if not checkout.success:
                raise SandboxError(f"cannot check out {task.base_commit}: {checkout.to_observation()}")
        for path, content in files.items():
            sandbox.write_file(path, content)
        for command in task.setup_commands:
            result = sandbox.run(command, timeout=SETUP_TIMEOUT)
            if not result.success:
                raise SandboxError(f"setup command {command!r} failed: {result.to_observation()[-2000:]}")
        sandbox.snapshot()
        sandbox.reset()

    def step(self, action: Any) -> TimeStep:
        tool, params = parse_action(action)
        if self._task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return episode_over(tool)
        try:
            self.profile.get_tool(tool).validate_params(params)
        except InvalidActionError as exc:
            return error_step(str(exc), tool=tool)
        if tool in self.profile.terminal_tools:
            return self._finish(tool, params)
        if tool in SANDBOX_TOOLS or tool == "run_tests":
            result = call_tool(self.sandbox, tool, params, test_command=self._task.test_command)
            return timestep_for(result, tool)
        error = f"tool {tool!r} has no implementation in {type(self).__name__}"
        return error_step(error, tool=tool)

    def _finish(self, tool: str, params: dict[str, Any]) -> TimeStep:
        self._done = True
        task = self._task
        info: dict[str, Any] = {"tool": tool, "exit_status": "submitted" if tool == "submit" else "finished"}
        info["patch"] = diff(self.sandbox)
        lines = [f"Episode ended ({tool})."]
        reward = 0.0
        if task.test_command:
            # Graded with nothing of the episode alive, the task's tests restored, a clean environment.
            result = run_tests(self.sandbox, task.test_command, grade=True, protected=protected_paths(task))
            counts = result.metadata.get("tests", {})
            passed = result.exit_code == 0
            info["success"] = passed
            info["score"] = 1.0 if passed else 0.0
            info["tests"] = {
                "passed": counts.get("passed", 0),
                "failed": counts.get("failed", 0),
                "errors": counts.get("error", 0),
                "output": result.output[-4000:],
            }
            reward = info["score"]
            lines.append(f"Tests {'passed' if passed else 'failed'} (exit code {result.exit_code}).")
        if params:
            info["answer"] = params.get("answer") or params.get("summary") or params.get("message")
        return TimeStep(observation="\n".join(lines), reward=reward, terminated=True, info=info)

    def close(self) -> None:
        if self._sandbox is not None and self._owns_sandbox:
            self._sandbox.close()
            self._sandbox = None
            self._loaded_key = None
