"""``knowlyr-trainer`` command line: ``sft``, ``dpo``, ``grpo``, ``prm``, ``eval`` (and ``serve`` when installed).

Every config field is a flag (``--batch-size``, ``--mask-observations/--no-mask-observations``,
``--report-to wandb,tensorboard``, ``--task-weights '{"a": 0.7, "b": 0.3}'``); ``--model`` is
``model_name_or_path``. ``--config file.yaml`` provides defaults, flags given on the command line
win. Each training command prints its result as one JSON line.

Multi-process: ``accelerate launch --num_processes 2 -m agenttrainer.cli sft --config c.yaml``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from collections.abc import Sequence
from typing import Any

import click

from agenttrainer.config import (
    DPOConfig,
    GRPOConfig,
    OnlineRLConfig,
    PRMConfig,
    SFTConfig,
    TrainConfig,
    read_config_file,
)
from agenttrainer.serving.cli import serve
from knowlyrcore.clikit import Group, json_argument, mcp_command, run, warn_deprecated


def _parse_list(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def _parse_dict(value: str | None) -> dict[str, float] | None:
    parsed = json_argument(value, "the value")
    if parsed is not None and not isinstance(parsed, dict):
        raise click.BadParameter("expected a JSON object")
    return parsed


# Short flags users type: --model, and for online RL --env and --tasks.
FLAG_ALIASES = {"model_name_or_path": ("--model",), "env_id": ("--env",), "tasks_file": ("--tasks",)}


def _field_option(f: dataclasses.Field, name: str, *, hidden: bool = False):
    """The click option of config field ``f``, as ``--name`` (an old name is a hidden option)."""
    help_text = f.metadata.get("help", "")
    flag = _flag(name)
    typ = str(f.type)
    names = [flag, *FLAG_ALIASES.get(name, ())]
    common = {"default": None, "hidden": hidden}
    if typ.startswith("bool"):
        return click.option(f"{flag}/--no-{flag[2:]}", name, help=help_text, **common)
    if typ.startswith("int"):
        return click.option(*names, name, type=int, help=help_text, **common)
    if typ.startswith("float"):
        return click.option(*names, name, type=float, help=help_text, **common)
    if typ.startswith("list"):
        return click.option(
            *names, name, callback=lambda c, p, v: _parse_list(v), help=help_text + " (comma-separated)", **common
        )
    if typ.startswith("dict"):
        return click.option(*names, name, callback=lambda c, p, v: _parse_dict(v), help=help_text + " (JSON)", **common)
    if "choices" in f.metadata:  # a registry's names, each with its summary
        choices = f.metadata["choices"]()
        described = "; ".join(f"{choice}: {summary}" for choice, summary in choices.items())
        return click.option(*names, name, type=click.Choice(list(choices)), help=f"{help_text} {described}.", **common)
    return click.option(*names, name, type=str, help=help_text, **common)


def _config_options(config_cls: type[TrainConfig]):
    """Decorator adding one option per config field (default None = not given) the recipe uses
    (not its ``unused_fields``), and a hidden one per old field name (``renamed_fields``) that is
    no field of ``config_cls``."""

    def decorate(fn):
        fields = {f.name: f for f in dataclasses.fields(config_cls) if f.name not in config_cls.unused_fields}
        for old, new in config_cls.renamed_fields.items():
            if old not in fields:
                fn = _field_option(fields[new], old, hidden=True)(fn)
        for f in reversed(fields.values()):
            fn = _field_option(f, f.name)(fn)
        return click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML config file.")(fn)

    return decorate


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _renamed(renamed: dict[str, str], values: dict[str, Any], spell: Any = str, where: Any = None) -> dict[str, Any]:
    """``values`` (flags, or a config file's keys) with each old name given under its new one, the
    user told once. ``spell`` writes a name as they typed it; ``where(old)`` places it (a file and line)."""
    out = dict(values)
    for old, new in renamed.items():
        if out.get(old) is None:
            out.pop(old, None)
            continue
        place = f"{where(old)}: " if where else ""
        if out.get(new) is not None:
            raise click.UsageError(f"{place}{spell(old)} is the old name of {spell(new)}: give only {spell(new)}")
        warn_deprecated(f"{place}{spell(old)} is deprecated: use {spell(new)}")
        out[new] = out.pop(old)
    return out


def _config_values(
    renamed: dict[str, str], config_file: str | None, flags: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, int]]:
    """The config file's values overridden by the flags given, old names under their new ones,
    and the line of each of the file's keys."""
    values, lines = read_config_file(config_file) if config_file else ({}, {})
    values = _renamed(
        renamed, values, where=lambda name: f"{config_file}:{lines[name]}" if name in lines else config_file
    )
    given = _renamed(renamed, {k: v for k, v in flags.items() if v is not None}, _flag)
    return {**values, **given}, lines


def _build(config_cls: type[TrainConfig], config_file: str | None, flags: dict[str, Any]) -> Any:
    values, lines = _config_values(config_cls.renamed_fields, config_file, flags)
    return _offline_config(config_cls, values, lines, config_file)


def _offline_config(
    config_cls: type[TrainConfig], values: dict[str, Any], lines: dict[str, int], config_file: str | None
) -> Any:
    config = config_cls.from_dict(values, source=config_file or "config", lines=lines)  # ConfigError: exit 2
    if not config.train_file:
        raise click.UsageError("--train-file (or train_file in --config) is required")
    return config


def _run(trainer_cls: Any, config: TrainConfig) -> None:
    # bad data / config (exit 2) and a non-finite loss (exit 1) reach clikit.run as one line each
    trainer = trainer_cls(config)
    result = trainer.train()
    if trainer.accelerator.is_main_process:
        click.echo(json.dumps(result, default=str))


@click.group(cls=Group)
@click.version_option(package_name="knowlyr-trainer")
def cli() -> None:
    """Train LLM tool-use agents on knowlyr-hub trajectory exports: SFT, DPO, GRPO; and process reward models (prm)."""


@cli.command()
@_config_options(SFTConfig)
def sft(config_file: str | None, **flags: Any) -> None:
    """Supervised fine-tuning (agent format, observation masking, step-weighted loss, ...)."""
    from agenttrainer.trainers.sft import SFTTrainer

    _run(SFTTrainer, _build(SFTConfig, config_file, flags))


@cli.command()
@_config_options(DPOConfig)
def dpo(config_file: str | None, **flags: Any) -> None:
    """Direct preference optimisation on prompt/chosen/rejected pairs."""
    from agenttrainer.trainers.dpo import DPOTrainer

    _run(DPOTrainer, _build(DPOConfig, config_file, flags))


@cli.command()
@click.option(
    "--online",
    is_flag=True,
    default=None,
    help="Online RL: act in a live environment (--env, --tasks) every iteration instead of reading --train-file.",
)
@_config_options(OnlineRLConfig)
def grpo(config_file: str | None, online: bool | None, **flags: Any) -> None:
    """GRPO: offline over scored trajectory groups (--train-file), or online in a live environment.

    Online: knowlyr-trainer grpo --online --env knowlyr/retail --tasks train.jsonl --model ./sft/final
    (--algorithm: any registered algorithm; YAML configs may set online: true).
    """
    values = _yaml_values(config_file)
    online = bool(online or values.pop("online", False))
    if online:
        from agenttrainer.online import OnlineRLTrainer

        values, lines = _config_values(OnlineRLConfig.renamed_fields, config_file, flags)
        values.pop("online", None)
        config = OnlineRLConfig.from_dict(values, source=config_file or "command line", lines=lines)
        if not config.env_id or not config.tasks_file:
            raise click.UsageError("--online needs --env (a registered environment id) and --tasks (tasks JSONL)")
        _run(OnlineRLTrainer, config)
        return
    # Offline, --max-steps (max_steps) is the old name of --max-optimizer-steps; online it counts an
    # episode's steps. An online option (or its old name, --max-turns) needs --online.
    values, lines = _config_values(GRPOConfig.renamed_fields, config_file, flags)
    values.pop("online", None)
    offline = {f.name for f in dataclasses.fields(GRPOConfig)}
    online_fields = {f.name for f in dataclasses.fields(OnlineRLConfig)} | set(OnlineRLConfig.renamed_fields)
    # keys that are no field at all are left to the config's own (content-safe) unknown-field error
    online_only = sorted(k for k in values if k not in offline and k in online_fields)
    if online_only:
        given = ", ".join(_flag(k) for k in online_only)
        raise click.UsageError(f"{given}: online RL options; add --online (or online: true in the config)")
    from agenttrainer.trainers.grpo import GRPOTrainer

    _run(GRPOTrainer, _offline_config(GRPOConfig, values, lines, config_file))


@cli.command()
@_config_options(PRMConfig)
def prm(config_file: str | None, **flags: Any) -> None:
    """Train a process reward model: a text model with a scalar head (extra: prm).

    \b
    knowlyr-trainer prm --train-file prm.jsonl --eval-file prm-eval.jsonl --output-dir runs/prm

    Data: JSONL, one object per trajectory prefix: "text" (what the scorer reads after a step:
    the task and the steps so far, as knowlyrcore.prefix_text.step_prefixes renders them) and
    "label" (the probability in [0, 1] that the task still succeeds from there, e.g. the mean
    outcome of continuations; 0 or 1 for a final step), optionally "task_id" (prefixes of one
    task with labels at least --margin apart form the pairs of the pairwise loss),
    "trajectory_id", "step", "group" and "continuations". A bad line stops the run with
    file:line: field: problem (exit 2). The loss is BCE against the labels plus
    --pairwise-weight x -log sigmoid(logit_i - logit_j) over those pairs. The model goes to
    OUTPUT_DIR/final, which knowlyr-reward's learned layer loads (LearnedScorer); with
    --eval-file the result reports eval loss and ROC AUC (label >= 0.5 as success).
    """
    from agenttrainer.trainers.prm import PRMTrainer

    _run(PRMTrainer, _build(PRMConfig, config_file, flags))


def _yaml_values(config_file: str | None) -> dict[str, Any]:
    if config_file is None:
        return {}
    values, _lines = read_config_file(config_file)  # errors name the file and line, never echo content
    return dict(values)


@cli.command("eval")
@click.option("--model", "model_name_or_path", required=True, help="Model path or alias.")
@click.option("--eval-file", required=True, type=click.Path(dir_okay=False), help="SFT, DPO or GRPO JSONL.")
@click.option("--batch-size", type=int, default=4, show_default=True)
@click.option("--max-length", type=int, default=2048, show_default=True)
@click.option("--bf16/--no-bf16", default=True, show_default=True, help="bf16 autocast.")
@click.option("--agent-format/--no-agent-format", default=True, show_default=True)
@click.option("--mask-observations/--no-mask-observations", default=True, show_default=True)
@click.option("--device", default=None, help="cpu, cuda, cuda:1, ... (default: CUDA when available, else CPU).")
def eval_command(model_name_or_path: str, eval_file: str, **options: Any) -> None:
    """Evaluate a model: loss/perplexity/token accuracy, preference accuracy or group top-1."""
    import torch

    from agenttrainer.eval import evaluate_model, read_eval_data
    from agenttrainer.models import load_model_and_tokenizer

    formats = {k: options.pop(k) for k in ("agent_format", "mask_observations")}
    data = read_eval_data(eval_file, **formats)  # every record is checked before the model loads
    model, tokenizer = load_model_and_tokenizer(model_name_or_path, torch_dtype=torch.float32)
    click.echo(json.dumps(evaluate_model(model, tokenizer, data, **options)))


@cli.command("retriever")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML of RetrieverConfig fields.")
@click.option("--model", "model_name_or_path", help="Encoder to start from (default: all-minilm-l6-v2).")
@click.option("--library", help="Tools JSONL/JSON (OpenAI tools, MCP tools/list), or 'generated'.")
@click.option("--train-file", help="{query, tool} JSONL, trajectory JSONL to mine pairs from, or 'generated'.")
@click.option("--output-dir")
@click.option("--max-optimizer-steps", type=click.IntRange(min=1))
@click.option("--max-steps", type=click.IntRange(min=1), hidden=True)  # the old name of --max-optimizer-steps
@click.option("--batch-size", type=click.IntRange(min=1))
@click.option("--learning-rate", type=float)
@click.option("--hard-negatives", type=click.IntRange(min=0))
def retriever_command(config_file: str | None, **flags: Any) -> None:
    """Fine-tune a tool-retrieval encoder contrastively (in-batch and BM25-mined hard negatives);
    prints a JSON report with recall@5 / MRR before and after on held-out pairs (extra: retriever)."""
    from agenttrainer.retrieval import RetrieverConfig, train_retriever

    renamed = RetrieverConfig.renamed_fields
    _renamed(renamed, _yaml_values(config_file), where=lambda name: config_file)  # from_yaml maps the file's keys
    config = RetrieverConfig.from_yaml(config_file, **_renamed(renamed, flags, _flag))
    click.echo(json.dumps(train_retriever(config)))


@cli.command("retriever-search")
@click.argument("query")
@click.option("--library", default="generated", show_default=True, help="Tools JSONL/JSON, or 'generated'.")
@click.option(
    "--model",
    "model_name_or_path",
    default="all-minilm-l6-v2",
    show_default=True,
    help="Encoder: the packaged all-MiniLM-L6-v2 or a `retriever` output directory.",
)
@click.option("-k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option(
    "--hybrid",
    is_flag=True,
    help="Fuse the encoder's ranking with BM25's (reciprocal rank); the score printed is then the fused one.",
)
def retriever_search_command(query: str, library: str, model_name_or_path: str, k: int, hybrid: bool) -> None:
    """Search a tool library with a dense encoder (or, --hybrid, the encoder and BM25 fused);
    one JSON line per tool, best first."""
    from agenttrainer.retrieval import DenseIndex, Encoder, FusedIndex
    from agenttrainer.retrieval.contrastive import load_library

    tools = load_library(library)
    index = DenseIndex(tools, Encoder(model_name_or_path), cache=True, progress=True)
    if hybrid:
        index = FusedIndex(tools, index)
    for tool, score in index.search(query, k=k):
        click.echo(json.dumps({"tool": tool.name, "score": round(score, 4), "description": tool.description}))


cli.add_command(mcp_command("knowlyr-trainer", "agenttrainer.mcp_server"))
# `serve` needs the serve extra only when it runs (it says so then); listing it needs nothing.
cli.add_command(serve)


# Deprecation notices transformers (5.x) raises on every LoRA run (peft reads is_gradient_checkpointing),
# every rollout or generation (the KV cache passed as past_key_values, which transformers 4.x needs) and
# old configs; nothing the user wrote triggers them. Silenced here only, for the command line.
NOISY_FUTURE_WARNINGS = (
    r"`past_key_values` is deprecated",
    r"`is_gradient_checkpointing` is deprecated",
    r"`gradient_checkpointing_(enable|disable)` is deprecated",
    r"`rope_scaling` is deprecated",
)


def quiet_library_warnings() -> None:
    """Hide the known noisy FutureWarnings and show knowlyr-trainer's own info lines (which model a
    run directory resolved to, a model conversion) on stderr."""
    for message in NOISY_FUTURE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
    logger = logging.getLogger("agenttrainer")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # printed once, even where the root logger has a handler too


def main(argv: Sequence[str] | None = None) -> int:
    quiet_library_warnings()
    return run(cli, argv, prog_name="knowlyr-trainer")


if __name__ == "__main__":
    raise SystemExit(main())
