"""``knowlyr-trainer serve CHECKPOINT``: serve a checkpoint over the OpenAI chat-completions API,
and as a token-in / token-out generation backend for online RL (``/v1/completions``).

    knowlyr-trainer serve ./output/sft/final --port 8000
    knowlyr-trainer serve smollm2-135m --port 0          # any free port; the URL is printed
    python -m agenttrainer.serving smollm2-135m          # the same without the trainer CLI
    knowlyr-trainer serve ./output/sft/final --allow-weight-updates   # the trainer pushes new weights
    knowlyr-trainer serve --engine vllm smollm2-135m --port 8000      # a real vLLM (docs/vllm.md)

Then any OpenAI client works: ``OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")``,
and so does ``agenttrainer.acting.ServerGenerator("http://127.0.0.1:8000/v1", name)``.
``--api-key KEY`` (or ``$KNOWLYR_SERVE_API_KEY``) makes every route but ``/health`` require
``Authorization: Bearer KEY``; binding anything but loopback without a key is refused unless
``--insecure``. Requests are capped (``--max-body-bytes``, ``--max-prompt-tokens``,
``--max-tokens-limit``, ``--max-request-tokens``, ``--max-json-depth``, ``--max-tools-bytes``),
``/v1/completions`` batches are sampled in micro-batches of ``--max-batch-tokens`` (which bounds
the memory of a generation), and so is the load (``--max-concurrent`` generations run,
``--max-queue`` wait, more get 429).
``--allow-weight-updates`` enables ``POST /v1/load_weights {"path"}``, which loads a checkpoint or
LoRA adapter from any directory on the server's disk that a client names: off by default.
The server binds its socket first (a busy port fails before the model loads), prints ``serving <name> at <url>`` once
the model is loaded, and answers ``GET /health`` when ready (poll it rather than sleeping).
Needs the ``serve`` extra: ``pip install 'knowlyr-trainer[serve]'``.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import click

from agenttrainer.serving.limits import API_KEY_ENV, Limits, is_loopback
from knowlyrcore.errors import require_extra

DEFAULT_LIMITS = Limits()

# One flag per Limits field, in --help order: (field, smallest, largest, help); defaults are Limits'.
LIMIT_OPTIONS = [
    (
        "max_tokens_limit",
        1,
        None,
        "Largest max_tokens a request may ask for; above it the request is refused (400), not clamped.",
    ),
    ("max_prompt_tokens", 1, None, "Longest prompt in tokens (400 above it) [default: the model's context length]."),
    (
        "max_request_tokens",
        1,
        None,
        "Most tokens one /v1/completions request may need: its prompts' tokens plus max_tokens for each prompt; "
        "413 above it.",
    ),
    (
        "max_batch_tokens",
        1,
        None,
        "Most tokens one generation batch holds, prompts x (longest prompt + max_tokens); memory grows with it, "
        "not with the request: a larger /v1/completions batch runs in several micro-batches, and a prompt that "
        "alone needs more is refused (400).",
    ),
    ("max_body_bytes", 1, None, "Largest request body; a larger one is refused (413) before it is read."),
    (
        "max_json_depth",
        1,
        500,
        "Deepest nesting of lists and objects in a request body (tool schemas included); 400 beyond.",
    ),
    ("max_tools_bytes", 1, None, "Largest 'tools' of a chat request, as JSON; 400 beyond."),
    ("max_concurrent", 1, None, "Generations that run at once (in threads on the one model)."),
    ("max_queue", 0, None, "Generation requests that wait for a free slot; more get 429 with Retry-After."),
]


def _limit_options(fn: Any) -> Any:
    for field, smallest, largest, help_text in reversed(LIMIT_OPTIONS):
        default = getattr(DEFAULT_LIMITS, field)
        fn = click.option(
            "--" + field.replace("_", "-"),
            field,
            default=default,
            show_default=default is not None,
            type=click.IntRange(min=smallest, max=largest),
            help=help_text,
        )(fn)
    return fn


def _serve_vllm(
    checkpoint: str,
    host: str,
    port: int,
    model_name: str | None,
    dtype: str,
    api_key: str | None,
    allow_weight_updates: bool,
    seed: int | None,
    vllm_args: tuple[str, ...],
) -> None:
    from agenttrainer.models import ModelLoadError
    from agenttrainer.serving.vllm import VLLMNotFoundError, serve_vllm

    try:
        serve_vllm(
            checkpoint,
            host=host,
            port=port,
            model_name=model_name or _default_name(checkpoint),
            dtype=dtype,
            api_key=api_key,
            seed=seed,
            allow_weight_updates=allow_weight_updates,
            extra_args=vllm_args,
        )
    except (VLLMNotFoundError, ModelLoadError, FileNotFoundError, ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None


def _default_name(checkpoint: str) -> str:
    path = Path(checkpoint)
    return path.name if path.is_dir() else checkpoint


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint")
@click.option(
    "--engine",
    type=click.Choice(["knowlyr", "vllm"]),
    default="knowlyr",
    show_default=True,
    help="knowlyr: this package's server. vllm: start vLLM's OpenAI server for CHECKPOINT from its own venv "
    "($KNOWLYR_VLLM_PYTHON, else .venv-vllm from scripts/install_vllm.sh), with CPU settings; "
    "--allow-weight-updates then enables its in-place reload (ServerGenerator push_weights='vllm', loopback "
    "only). The request limits and --max-tokens are the knowlyr engine's. See docs/vllm.md.",
)
@click.option(
    "--vllm-arg",
    "vllm_args",
    multiple=True,
    help="--engine vllm: one more argument for vLLM's api_server (repeatable), e.g. --vllm-arg=--enable-lora.",
)
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
    "--api-key",
    envvar=API_KEY_ENV,
    default=None,
    help=f"Require 'Authorization: Bearer KEY' on every route but /health [env: {API_KEY_ENV}].",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Serve a non-loopback --host without an API key (anyone who reaches the port can use the model).",
)
@_limit_options
@click.option(
    "--allow-weight-updates",
    is_flag=True,
    help="Enable POST /v1/load_weights, which loads weights from any directory on this machine's disk "
    "that a client names (off by default; enable it only for a trusted client such as the trainer).",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed the sampler once at start, so a restarted server answers the same unseeded requests with "
    "the same samples (a request's own 'seed' still wins) [default: a fresh random seed per process].",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
def serve(
    checkpoint: str,
    engine: str,
    vllm_args: tuple[str, ...],
    host: str,
    port: int,
    model_name: str | None,
    dtype: str,
    default_max_tokens: int,
    api_key: str | None,
    insecure: bool,
    allow_weight_updates: bool,
    seed: int | None,
    log_level: str,
    **limit_values: Any,
) -> None:
    """Serve CHECKPOINT (a directory or alias) as an OpenAI-compatible API: chat completions, and
    completions over token ids for online RL (vLLM's fields)."""
    api_key = api_key or None  # an empty KNOWLYR_SERVE_API_KEY is no key
    if not api_key and not insecure and not is_loopback(host):
        raise click.ClickException(
            f"refusing to serve on {host} without an API key: anyone who can reach it could use the model; "
            f"pass --api-key KEY (or set {API_KEY_ENV}), or --insecure to serve without one"
        )
    if engine == "vllm":
        _serve_vllm(checkpoint, host, port, model_name, dtype, api_key, allow_weight_updates, seed, vllm_args)
        return
    if vllm_args:
        raise click.UsageError("--vllm-arg needs --engine vllm")
    limits = Limits(**limit_values)
    if default_max_tokens > limits.max_tokens_limit:
        raise click.ClickException(
            f"--max-tokens {default_max_tokens} is above --max-tokens-limit {limits.max_tokens_limit}"
        )
    uvicorn = require_extra("uvicorn", "knowlyr-trainer", "serve", "serving")
    require_extra("starlette", "knowlyr-trainer", "serve", "serving")  # the app below imports it
    from agenttrainer.acting.inference import AgentInference
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
    if seed is not None:
        import torch

        torch.manual_seed(seed)  # after loading: the draws of unseeded requests start here
    name = model_name or _default_name(checkpoint)
    app = create_app(
        engine,
        name,
        default_max_tokens=default_max_tokens,
        allow_weight_updates=allow_weight_updates,
        limits=limits,
        api_key=api_key,
    )
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    click.echo(f"serving {name} at http://{url_host}:{bound_port}/v1", nl=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=log_level in ("info", "debug")))
    server.run(sockets=[sock])
