"""MCP server (stdio) exposing training runs to agents: ``train``, ``status``, ``eval``.

``train`` starts ``knowlyr-trainer sft|dpo|grpo --config FILE`` as a detached subprocess and
returns a run id at once; ``status`` reports a run from what it leaves on disk (state, exit code,
the latest ``metrics.jsonl`` line, checkpoints, the final model, the CLI's result line or the
tail of its stderr); ``eval`` runs ``knowlyr-trainer eval`` on a model (or a run's final model)
and returns its metrics. Runs live in ``$KNOWLYR_TRAINER_RUNS`` (default
``<knowlyr cache>/runs/<run id>/``: ``run.json``, ``stdout.log``, ``stderr.log``, ``exit.json``),
so ``status`` keeps working after the MCP server restarts.

The caller is not trusted with the host: every path (the config, the files and models it names,
``output_dir``, ``cwd``, ``eval``'s model and data) must lie inside the allowed roots (the working
directory, or each ``--root DIR``, plus the roots the client declares; ``knowlyrcore.roots``); a
config is validated before the run starts and its errors never echo its text; ``output_dir`` must
be new, empty, or one this server trained into before (``.knowlyr-trainer`` marker). Runs are
jobs with limits: at most ``--max-runs`` at once (default 1), each killed (its whole process
group) after ``--max-run-seconds``, which ``exit.json`` records as ``"timed_out": true``.

Run it with ``knowlyr-trainer mcp [--root DIR ...]`` or ``python -m agenttrainer.mcp_server``; it
needs the ``mcp`` extra (the SDK shim, error rule and launcher are ``knowlyrcore.mcp``).
"""

from __future__ import annotations

# First, before the imports that need the mcp extra (the SDK, anyio):
if __name__ == "__main__":  # python -m agenttrainer.mcp_server: without the SDK, one error line, no traceback
    from knowlyrcore.mcp import run_as_main

    run_as_main("knowlyr-trainer", "agenttrainer.mcp_server")

import argparse
import functools
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from agenttrainer.config import ConfigError, DPOConfig, GRPOConfig, SFTConfig, read_config_file
from agenttrainer.models.aliases import cache_root
from knowlyrcore.mcp import Context, ToolError, guard, new_server, refresh_roots, run_server
from knowlyrcore.roots import AllowedRoots

METHODS = {"sft": SFTConfig, "dpo": DPOConfig, "grpo": GRPOConfig}
STDERR_TAIL_LINES = 20
EVAL_TIMEOUT_SECONDS = 3600
OUTPUT_MARKER = ".knowlyr-trainer"  # in an output_dir this server trained into: it may train there again

# The process train() starts: it runs the trainer in a process group of its own, kills that group
# (SIGTERM, then SIGKILL after 10 s) when the wall-clock limit passes, then records the exit
# atomically, so how a run ended is known from disk even if this MCP server is gone by then.
_WRAPPER = """
import json, os, signal, subprocess, sys, time
run_dir, limit, command = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
timed_out = False
with open(os.path.join(run_dir, "stdout.log"), "wb") as out, open(os.path.join(run_dir, "stderr.log"), "wb") as err:
    child = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
    try:
        code = child.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
            try:
                os.killpg(child.pid, sig)
            except ProcessLookupError:
                pass
            try:
                code = child.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                pass
        err.write(b"\\nknowlyr-trainer mcp: killed after the wall-clock limit of %g s\\n" % limit)
    try:
        os.killpg(child.pid, signal.SIGKILL)  # whatever the trainer left running in its group
    except ProcessLookupError:
        pass
tmp = os.path.join(run_dir, "exit.json.tmp")
with open(tmp, "w") as fh:
    json.dump({"exit_code": code, "finished_at": time.time(), "timed_out": timed_out, "time_limit_seconds": limit}, fh)
os.replace(tmp, os.path.join(run_dir, "exit.json"))
"""

server = new_server("knowlyr-trainer", instructions="Start and monitor SFT/DPO/GRPO training runs; evaluate models.")
# main() replaces these from its command line
MAX_RUNS = 1
MAX_RUN_SECONDS = 24 * 3600.0


def runs_root() -> Path:
    return Path(os.environ.get("KNOWLYR_TRAINER_RUNS") or cache_root() / "runs").expanduser()


def _flag(key: str, value: Any) -> list[str]:
    """A config override as one CLI flag: ``{"num_epochs": 2}`` -> ``--num-epochs=2``.

    Joined with ``=``, a value can never be parsed as another option (``"--output-dir=/etc"``);
    the key was already checked to be a config field.
    """
    name = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return [name if value else "--no-" + key.replace("_", "-")]
    if isinstance(value, (list, tuple)):
        return [f"{name}={','.join(str(v) for v in value)}"]
    if isinstance(value, dict):
        return [f"{name}={json.dumps(value)}"]
    return [f"{name}={value}"]


def _guard(fn, *args, **kwargs):
    with guard():
        return fn(*args, **kwargs)


def _check_model(roots: AllowedRoots, model: str | None, workdir: Path) -> None:
    """A model given as a path (absolute, ./ or ../, or existing) must be inside the roots; an alias
    or a Hugging Face id is left to the model loader."""
    if model and (os.path.isabs(model) or model.startswith(".") or (workdir / model).exists()):
        _guard(roots.readable, model, workdir)


def _claim_output_dir(roots: AllowedRoots, output_dir: str, workdir: Path, run_id: str) -> Path:
    """``output_dir`` inside the roots, and new, empty or marked as trained into by this server."""
    target = _guard(roots.writable_dir, output_dir, workdir)
    if target.is_dir() and not (target / OUTPUT_MARKER).is_file() and any(target.iterdir()):
        raise ToolError(
            f"output_dir {target} already holds files the trainer did not write; name a new or empty directory"
        )
    target.mkdir(parents=True, exist_ok=True)
    (target / OUTPUT_MARKER).write_text(json.dumps({"run_id": run_id}) + "\n")
    return target


def _running_runs() -> list[str]:
    running = []
    for run_dir in runs_root().glob("*"):
        try:
            if _run_status(run_dir)["state"] == "running":
                running.append(run_dir.name)
        except ToolError:  # not a run (no readable run.json)
            continue
    return running


@server.tool()
async def train(
    method: str,
    config: str,
    overrides: dict[str, Any] | None = None,
    cwd: str | None = None,
    ctx: Context | None = None,
) -> dict[str, Any]:
    """Start `knowlyr-trainer <method> --config <config>` in the background; returns its run id.

    `method` is sft, dpo or grpo. `overrides` are config fields that win over the YAML
    (e.g. {"num_epochs": 1, "use_lora": true}). Relative paths are resolved against `cwd`
    (default: this server's working directory). Without an output_dir in the overrides or the
    config, the run writes to <run dir>/output. Every path must be inside the allowed roots; the
    server runs a limited number of runs at once, each for a limited time.
    """
    if method not in METHODS:
        raise ToolError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    roots = await refresh_roots(server, ctx)
    # the server's own working directory is the operator's choice; a cwd from the client must be in the roots
    workdir = _guard(roots.readable, cwd) if cwd is not None else Path.cwd()
    if not workdir.is_dir():
        raise ToolError(f"cwd {workdir} is not a directory")
    config_path = _guard(roots.readable, config, workdir)
    if not config_path.is_file():
        raise ToolError(f"config file {config_path} does not exist")
    running = _running_runs()
    if len(running) >= MAX_RUNS:
        raise ToolError(
            f"{len(running)} training run(s) already running ({', '.join(running)}); this server runs at most "
            f"{MAX_RUNS} at once (--max-runs): wait for one to finish"
        )
    overrides = dict(overrides or {})
    try:
        values, _ = read_config_file(config_path)
        # The whole config is checked now, so a bad one fails here (with the same clean message)
        # rather than as a failed run, and the paths it names can be checked against the roots.
        checked = METHODS[method].from_yaml(config_path, **{**overrides, "output_dir": "."})
    except ConfigError as exc:
        raise ToolError(str(exc)) from None
    for name in ("train_file", "eval_file", "continual_buffer_path"):  # the last is in SFT's selection group
        if name in checked.flat_keys() and checked.value(name):
            _guard(roots.readable, checked.value(name), workdir)
    if checked.resume_from_checkpoint not in (None, "latest"):
        _guard(roots.readable, checked.resume_from_checkpoint, workdir)
    for name in ("model_name_or_path", "ref_model_name_or_path"):
        _check_model(roots, getattr(checked, name, None), workdir)

    run_id = time.strftime("%Y%m%d-%H%M%S-") + f"{method}-{secrets.token_hex(3)}"
    run_dir = runs_root() / run_id
    chosen = overrides.pop("output_dir", None) or values.get("output_dir")
    output_dir = str(_claim_output_dir(roots, str(chosen), workdir, run_id)) if chosen else str(run_dir / "output")
    run_dir.mkdir(parents=True)

    command = [
        sys.executable,
        "-m",
        "agenttrainer.cli",
        method,
        "--config",
        str(config_path),
        "--output-dir",
        output_dir,
    ]
    for key, value in overrides.items():
        command += _flag(key, value)
    process = subprocess.Popen(
        [sys.executable, "-c", _WRAPPER, str(run_dir), str(MAX_RUN_SECONDS), *command],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives this server and is not hit by signals meant for it
    )
    record = {
        "run_id": run_id,
        "method": method,
        "config": str(config_path),
        "overrides": overrides,
        "cwd": str(workdir),
        "output_dir": output_dir,
        "command": command,
        "pid": process.pid,
        "started_at": time.time(),
        "time_limit_seconds": MAX_RUN_SECONDS,
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    return {"run_id": run_id, "output_dir": output_dir, "pid": process.pid, "time_limit_seconds": MAX_RUN_SECONDS}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _last_json_line(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (the CLI's result line, the latest metrics)."""
    for line in reversed(text.splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A finished child of this server stays a zombie until reaped; reap it so it reads as gone.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # not our child (started by an earlier server): kill(0) said it exists
    return done == 0


def _run_status(run_dir: Path) -> dict[str, Any]:
    record = _read_json(run_dir / "run.json")
    if record is None:
        raise ToolError(f"{run_dir} is not a training run (no readable run.json)")
    finished = _read_json(run_dir / "exit.json")
    if finished is not None:
        state = "succeeded" if finished["exit_code"] == 0 else "failed"
    else:
        state = "running" if _alive(record["pid"]) else "lost"  # killed before it could record an exit
    output = Path(record["output_dir"])
    metrics_file = output / "metrics.jsonl"
    checkpoints = sorted(
        (p for p in output.glob("checkpoint-*") if p.name[11:].isdigit()), key=lambda p: int(p.name[11:])
    )
    status: dict[str, Any] = {
        "run_id": record["run_id"],
        "method": record["method"],
        "state": state,
        "exit_code": finished["exit_code"] if finished else None,
        "timed_out": bool(finished.get("timed_out")) if finished else False,
        "pid": record["pid"],
        "started_at": record["started_at"],
        "finished_at": finished["finished_at"] if finished else None,
        "output_dir": record["output_dir"],
        "latest_metrics": _last_json_line(_read_text(metrics_file)),
        "metrics_file": str(metrics_file) if metrics_file.is_file() else None,
        "checkpoints": [str(p) for p in checkpoints],
        "final_model": str(output / "final") if (output / "final" / "config.json").is_file() else None,
        "result": _last_json_line(_read_text(run_dir / "stdout.log")) if state == "succeeded" else None,
        "log": str(run_dir / "stderr.log"),
    }
    if state in ("failed", "lost"):
        lines = _read_text(run_dir / "stderr.log").splitlines()
        status["error_tail"] = "\n".join(lines[-STDERR_TAIL_LINES:])
    return status


@server.tool()
def status(run_id: str | None = None) -> dict[str, Any]:
    """State of one run (running / succeeded / failed / lost) with its latest metrics, checkpoints,
    final model and result; without `run_id`, a summary of every run, newest first."""
    root = runs_root()
    if run_id is not None:
        run_dir = root / run_id
        if "/" in run_id or run_id.startswith(".") or not run_dir.is_dir():
            raise ToolError(f"no run {run_id!r} in {root}")
        return _run_status(run_dir)
    statuses = [_run_status(p) for p in root.glob("*") if (p / "run.json").is_file()]
    statuses.sort(key=lambda s: s["started_at"], reverse=True)
    keys = ("run_id", "method", "state", "output_dir", "final_model")
    runs = [{k: s[k] for k in keys} for s in statuses]
    return {"runs_dir": str(root), "runs": runs}


@server.tool(name="eval")
async def eval_model(
    eval_file: str,
    model: str | None = None,
    run_id: str | None = None,
    batch_size: int = 4,
    max_length: int = 2048,
    ctx: Context | None = None,
) -> dict[str, Any]:
    """Evaluate `model` (a checkpoint dir or alias) or run `run_id`'s final model on `eval_file`
    (SFT, DPO or GRPO JSONL): loss/perplexity/token accuracy, preference accuracy or group top-1.
    Paths must be inside the allowed roots."""
    if (model is None) == (run_id is None):
        raise ToolError("pass exactly one of model or run_id")
    roots = await refresh_roots(server, ctx)
    eval_file = str(_guard(roots.readable, eval_file))
    if run_id is not None:
        final = status(run_id)["final_model"]
        if final is None:
            raise ToolError(f"run {run_id} has no final model yet")
        model = final  # a run of this server wrote it
    else:
        _check_model(roots, model, Path.cwd())
    command = [
        sys.executable,
        "-m",
        "agenttrainer.cli",
        "eval",
        "--model",
        model,
        "--eval-file",
        eval_file,
        "--batch-size",
        str(batch_size),
        "--max-length",
        str(max_length),
    ]
    try:
        # in a worker thread (as the SDK runs synchronous tools): `status` stays answerable meanwhile
        run = functools.partial(subprocess.run, command, capture_output=True, text=True, timeout=EVAL_TIMEOUT_SECONDS)
        done = await anyio.to_thread.run_sync(run)
    except subprocess.TimeoutExpired:
        raise ToolError(f"evaluation did not finish within {EVAL_TIMEOUT_SECONDS} s") from None
    metrics = _last_json_line(done.stdout)
    if done.returncode != 0 or metrics is None:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit code {done.returncode}"
        raise ToolError(f"evaluation failed: {message}")
    return {"model": model, "eval_file": eval_file, "metrics": metrics}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="knowlyr-trainer mcp", description="MCP server (stdio) for knowlyr-trainer")
    parser.add_argument("--max-runs", type=int, default=MAX_RUNS, help="training runs at once (default 1)")
    parser.add_argument(
        "--max-run-seconds",
        type=float,
        default=MAX_RUN_SECONDS,
        help="wall-clock limit of a run; its process group is killed after it (default 24 h)",
    )

    def configure(args: argparse.Namespace) -> None:
        global MAX_RUNS, MAX_RUN_SECONDS
        if args.max_runs < 1 or not 0 < args.max_run_seconds < float("inf"):
            parser.error("--max-runs must be >= 1 and --max-run-seconds a positive number")
        MAX_RUNS, MAX_RUN_SECONDS = args.max_runs, args.max_run_seconds

    return run_server(server, argv, prog=parser.prog, parser=parser, configure=configure)
