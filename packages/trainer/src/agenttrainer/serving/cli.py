"""``knowlyr-trainer serve CHECKPOINT``: serve a checkpoint over the OpenAI chat-completions API,
and as a token-in / token-out generation backend for online RL (``/v1/completions``).

    knowlyr-trainer serve ./output/sft/final --port 8000
    knowlyr-trainer serve smollm2-135m --port 0          # any free port; the URL is printed
    python -m agenttrainer.serving smollm2-135m          # the same without the trainer CLI
    knowlyr-trainer serve ./output/sft/final --allow-weight-updates   # the trainer pushes new weights

Then any OpenAI client works: ``OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")``,
and so does ``agenttrainer.generation.ServerGenerator("http://127.0.0.1:8000/v1", name)``.
``--allow-weight-updates`` enables ``POST /v1/load_weights {"path"}``, which loads a checkpoint or
LoRA adapter from any directory on the server's disk that a client names: off by default.
The server binds its socket first (a busy port fails before the model loads), prints ``serving <name> at <url>`` once
the model is loaded, and answers ``GET /health`` when ready (poll it rather than sleeping).
Needs the ``serve`` extra: ``pip install 'knowlyr-trainer[serve]'``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import click


def _default_name(checkpoint: str) -> str:
    path = Path(checkpoint)
    return path.name if path.is_dir() else checkpoint


@click.command()
@click.argument("checkpoint")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 for all).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--model-name", default=None, help="Name clients pass as 'model' [default: checkpoint dir name].")
@click.option(
    "--dtype",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
    help="Weights dtype for inference.",
)
@click.option(
    "--max-tokens",
    "default_max_tokens",
    default=512,
    show_default=True,
    type=click.IntRange(min=1),
    help="Completion length when a request sets no max_tokens.",
)
@click.option(
    "--allow-weight-updates",
    is_flag=True,
    help="Enable POST /v1/load_weights, which loads weights from any directory on this machine's disk "
    "that a client names (off by default; enable it only for a trusted client such as the trainer).",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def serve(
    checkpoint: str,
    host: str,
    port: int,
    model_name: str | None,
    dtype: str,
    default_max_tokens: int,
    allow_weight_updates: bool,
    log_level: str,
) -> None:
    """Serve CHECKPOINT (a directory or alias) as an OpenAI-compatible API: chat completions, and
    completions over token ids for online RL (vLLM's fields)."""
    try:
        import uvicorn
    except ImportError:
        raise click.ClickException("serving needs the serve extra: pip install 'knowlyr-trainer[serve]'") from None
    from agenttrainer.inference import AgentInference
    from agenttrainer.models import ModelLoadError
    from agenttrainer.serving.app import create_app

    # Bind first so a busy port fails fast, before the model is loaded.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    try:
        engine = AgentInference.from_pretrained(checkpoint, torch_dtype=None if dtype == "auto" else dtype)
    except BaseException as exc:
        sock.close()
        if isinstance(exc, ModelLoadError):
            raise click.ClickException(str(exc)) from None
        raise
    name = model_name or _default_name(checkpoint)
    app = create_app(engine, name, default_max_tokens=default_max_tokens, allow_weight_updates=allow_weight_updates)
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    click.echo(f"serving {name} at http://{url_host}:{bound_port}/v1", nl=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=log_level in ("info", "debug")))
    server.run(sockets=[sock])
