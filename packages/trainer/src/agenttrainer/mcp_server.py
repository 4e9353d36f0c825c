"""MCP server (stdio) exposing training runs to agents: ``train``, ``status``, ``eval``.

``train`` starts ``knowlyr-trainer sft|dpo|grpo --config FILE`` as a detached subprocess and
returns a run id at once; ``status`` reports a run from what it leaves on disk (state, exit code,
the latest ``metrics.jsonl`` line, checkpoints, the final model, the CLI's result line or the
tail of its stderr); ``eval`` runs ``knowlyr-trainer eval`` on a model (or a run's final model)
and returns its metrics. Runs live in ``$KNOWLYR_TRAINER_RUNS`` (default
``<knowlyr cache>/runs/<run id>/``: ``run.json``, ``stdout.log``, ``stderr.log``, ``exit.json``),
so ``status`` keeps working after the MCP server restarts.

Run it with ``python -m agenttrainer.mcp_server``; it needs the ``mcp`` extra.
Works with the mcp SDK 1.x (``FastMCP``) and 2.x (``MCPServer``).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server
    from mcp.server.fastmcp.exceptions import ToolError

from agenttrainer.models.aliases import cache_root

METHODS = ("sft", "dpo", "grpo")
STDERR_TAIL_LINES = 20
EVAL_TIMEOUT_SECONDS = 3600

# The process train() starts: it runs the trainer, then records the exit code atomically, so how a
# run ended is known from disk even if this MCP server is gone by then.
_WRAPPER = """
import json, os, subprocess, sys, time
run_dir, command = sys.argv[1], sys.argv[2:]
with open(os.path.join(run_dir, "stdout.log"), "wb") as out, open(os.path.join(run_dir, "stderr.log"), "wb") as err:
    code = subprocess.call(command, stdout=out, stderr=err)
tmp = os.path.join(run_dir, "exit.json.tmp")
with open(tmp, "w") as fh:
    json.dump({"exit_code": code, "finished_at": time.time()}, fh)
os.replace(tmp, os.path.join(run_dir, "exit.json"))
"""

server = _Server("knowlyr-trainer", instructions="Start and monitor SFT/DPO/GRPO training runs; evaluate models.")


def runs_root() -> Path:
    return Path(os.environ.get("KNOWLYR_TRAINER_RUNS") or cache_root() / "runs").expanduser()


def _flag(key: str, value: Any) -> list[str]:
    """A config override as CLI flags: ``{"num_epochs": 2}`` -> ``--num-epochs 2``."""
    name = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return [name if value else "--no-" + key.replace("_", "-")]
    if isinstance(value, (list, tuple)):
        return [name, ",".join(str(v) for v in value)]
    if isinstance(value, dict):
        return [name, json.dumps(value)]
    return [name, str(value)]


def _config_output_dir(config: Path) -> str | None:
    import yaml

    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ToolError(f"{config}: not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ToolError(f"{config}: the config must be a mapping of field: value")
    return (data or {}).get("output_dir")


@server.tool()
def train(method: str, config: str, overrides: dict[str, Any] | None = None, cwd: str | None = None) -> dict[str, Any]:
    """Start `knowlyr-trainer <method> --config <config>` in the background; returns its run id.

    `method` is sft, dpo or grpo. `overrides` are config fields that win over the YAML
    (e.g. {"num_epochs": 1, "use_lora": true}). Relative paths are resolved against `cwd`
    (default: this server's working directory). Without an output_dir in the overrides or the
    config, the run writes to <run dir>/output.
    """
    if method not in METHODS:
        raise ToolError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    workdir = Path(cwd or os.getcwd()).resolve()
    if not workdir.is_dir():
        raise ToolError(f"cwd {workdir} is not a directory")
    config_path = (workdir / config).resolve()
    if not config_path.is_file():
        raise ToolError(f"config file {config_path} does not exist")
    overrides = dict(overrides or {})
    run_id = time.strftime("%Y%m%d-%H%M%S-") + f"{method}-{secrets.token_hex(3)}"
    run_dir = runs_root() / run_id
    run_dir.mkdir(parents=True)
    output_dir = overrides.pop("output_dir", None) or _config_output_dir(config_path) or str(run_dir / "output")
    output_dir = str((workdir / output_dir).resolve())

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
        [sys.executable, "-c", _WRAPPER, str(run_dir), *command],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # survives this server and is not hit by signals meant for it
    )
    record = {"run_id": run_id, "method": method, "config": str(config_path), "overrides": overrides,
              "cwd": str(workdir), "output_dir": output_dir, "command": command, "pid": process.pid,
              "started_at": time.time()}  # fmt: skip
    (run_dir / "run.json").write_text(json.dumps(record, indent=2))
    return {"run_id": run_id, "output_dir": output_dir, "pid": process.pid}


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
def eval_model(eval_file: str, model: str | None = None, run_id: str | None = None, batch_size: int = 4,
         max_length: int = 2048) -> dict[str, Any]:  # fmt: skip
    """Evaluate `model` (a checkpoint dir or alias) or run `run_id`'s final model on `eval_file`
    (SFT, DPO or GRPO JSONL): loss/perplexity/token accuracy, preference accuracy or group top-1."""
    if (model is None) == (run_id is None):
        raise ToolError("pass exactly one of model or run_id")
    if run_id is not None:
        final = status(run_id)["final_model"]
        if final is None:
            raise ToolError(f"run {run_id} has no final model yet")
        model = final
    command = [sys.executable, "-m", "agenttrainer.cli", "eval", "--model", model, "--eval-file", eval_file,
               "--batch-size", str(batch_size), "--max-length", str(max_length)]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=EVAL_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise ToolError(f"evaluation did not finish within {EVAL_TIMEOUT_SECONDS} s") from None
    metrics = _last_json_line(done.stdout)
    if done.returncode != 0 or metrics is None:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit code {done.returncode}"
        raise ToolError(f"evaluation failed: {message}")
    return {"model": model, "eval_file": eval_file, "metrics": metrics}


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
