"""``knowlyr-trainer`` command line: ``sft``, ``dpo``, ``grpo``, ``prm``, ``eval`` (and ``serve`` when installed).

Every config field is a flag (``--batch-size``, ``--mask-observations/--no-mask-observations``,
``--report-to wandb,tensorboard``, ``--task-weights '{"a": 0.7, "b": 0.3}'``); ``--model`` is
``model_name_or_path``. ``--config file.yaml`` provides defaults, flags given on the command line
win. Each training command prints its result as one JSON line. ``--max-optimizer-steps`` caps the
optimizer steps of any run; ``--max-steps`` is an episode's step budget (``grpo --online``).

Multi-process: ``accelerate launch --num_processes 2 -m agenttrainer.cli sft --config c.yaml``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

import click

from agenttrainer.config import (
    Config,
    DPOConfig,
    GRPOConfig,
    OnlineRLConfig,
    PRMConfig,
    RetrieverConfig,
    RunConfig,
    SFTConfig,
    TrainConfig,
    read_config_file,
)
from agenttrainer.config.base import Key
from agenttrainer.console import quiet_library_warnings
from agenttrainer.serving.cli import serve
from knowlyrcore.clikit import Group, json_argument, mcp_command, run


def _parse_list(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def _parse_dict(value: str | None) -> dict[str, float] | None:
    parsed = json_argument(value, "the value")
    if parsed is not None and not isinstance(parsed, dict):
        raise click.BadParameter("expected a JSON object")
    return parsed


# Short flags users type: --model, and for online RL --env and --tasks.
FLAG_ALIASES = {"model_name_or_path": ("--model",), "env_id": ("--env",), "tasks_file": ("--tasks",)}


def _key_option(key: Key):
    """The click option of config key ``key``, as ``--name`` (default None: not given)."""
    flag = _flag(key.name)
    names = [flag, *FLAG_ALIASES.get(key.name, ())]
    help_text, typ = key.help, key.type
    if typ.startswith("bool"):
        return click.option(f"{flag}/--no-{flag[2:]}", key.name, default=None, help=help_text)
    if typ.startswith("int"):
        return click.option(*names, key.name, type=int, default=None, help=help_text)
    if typ.startswith("float"):
        return click.option(*names, key.name, type=float, default=None, help=help_text)
    if typ.startswith("list"):
        return click.option(
            *names, key.name, callback=lambda c, p, v: _parse_list(v), help=help_text + " (comma-separated)"
        )
    if typ.startswith("dict"):
        return click.option(*names, key.name, callback=lambda c, p, v: _parse_dict(v), help=help_text + " (JSON)")
    if key.choices is not None:  # a registry's names, each with its summary
        choices = key.choices()
        described = "; ".join(f"{choice}: {summary}" for choice, summary in choices.items())
        return click.option(*names, key.name, type=click.Choice(list(choices)), help=f"{help_text} {described}.")
    return click.option(*names, key.name, type=str, default=None, help=help_text)


def _options(keys: Iterable[Key]):
    """Decorator adding one option per key and ``--config``."""

    def decorate(fn):
        for key in reversed(list(keys)):
            fn = _key_option(key)(fn)
        return click.option("--config", "config_file", type=click.Path(dir_okay=False), help="YAML config file.")(fn)

    return decorate


def _usable_keys(config_cls: type[Config]) -> dict[str, Key]:
    """The keys of ``config_cls`` its recipe uses (not its ``unused_fields``)."""
    unused = getattr(config_cls, "unused_fields", ())
    return {name: key for name, key in config_cls.flat_keys().items() if name not in unused}


def _config_options(config_cls: type[Config]):
    """Decorator adding one option per key of ``config_cls`` its recipe uses, and ``--config``."""
    return _options(_usable_keys(config_cls).values())


def _grpo_keys() -> list[Key]:
    """The ``grpo`` command's keys: offline GRPO's, then those only online RL has; the help says
    which of the two a key belongs to when not both, or what it means in each when that differs."""
    offline, online = _usable_keys(GRPOConfig), _usable_keys(OnlineRLConfig)
    keys = []
    for name in {**offline, **online}:
        if name not in online:
            keys.append(dataclasses.replace(offline[name], help=f"Offline: {offline[name].help}"))
        elif name not in offline:
            keys.append(dataclasses.replace(online[name], help=f"--online: {online[name].help}"))
        elif offline[name].help != online[name].help:
            both = f"Offline: {offline[name].help} --online: {online[name].help}"
            keys.append(dataclasses.replace(offline[name], help=both))
        else:
            keys.append(offline[name])
    return keys


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _config_values(config_file: str | None, flags: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """The config file's values overridden by the flags given, and the line of each of the file's keys."""
    values, lines = read_config_file(config_file) if config_file else ({}, {})
    return {**values, **{k: v for k, v in flags.items() if v is not None}}, lines


def _build(config_cls: type[Config], config_file: str | None, values: dict[str, Any], lines: dict[str, int]) -> Any:
    return config_cls.from_dict(values, source=config_file or "command line", lines=lines)  # ConfigError: exit 2


def _offline_config(
    config_cls: type[TrainConfig], config_file: str | None, values: dict[str, Any], lines: dict[str, int]
) -> Any:
    config = _build(config_cls, config_file, values, lines)
    if not config.train_file:
        raise click.UsageError("--train-file (or train_file in --config) is required")
    return config


def _run(trainer_cls: Any, config: RunConfig) -> None:
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

    _run(SFTTrainer, _offline_config(SFTConfig, config_file, *_config_values(config_file, flags)))


@cli.command()
@_config_options(DPOConfig)
def dpo(config_file: str | None, **flags: Any) -> None:
    """Direct preference optimisation on prompt/chosen/rejected pairs."""
    from agenttrainer.trainers.dpo import DPOTrainer

    _run(DPOTrainer, _offline_config(DPOConfig, config_file, *_config_values(config_file, flags)))


@cli.command()
@click.option(
    "--online",
    is_flag=True,
    default=None,
    help="Online RL: act in a live environment (--env, --tasks) every iteration instead of reading --train-file.",
)
@_options(_grpo_keys())
def grpo(config_file: str | None, online: bool | None, **flags: Any) -> None:
    """GRPO: offline over scored trajectory groups (--train-file), or online in a live environment.

    Online: knowlyr-trainer grpo --online --env knowlyr/retail --tasks train.jsonl --model ./sft/final
    (--algorithm: any registered algorithm; YAML configs may set online: true).
    """
    values, lines = _config_values(config_file, flags)
    online = bool(online or values.pop("online", False))
    config_cls, other = (OnlineRLConfig, GRPOConfig) if online else (GRPOConfig, OnlineRLConfig)
    # keys that are no field of either are left to the config's own (content-safe) unknown-field error
    misplaced = sorted(k for k in values if k not in config_cls.flat_keys() and k in other.flat_keys())
    if misplaced:
        given = ", ".join(_flag(k) for k in misplaced)
        if online:
            raise click.UsageError(f"{given}: options of offline GRPO over a --train-file; drop --online")
        raise click.UsageError(f"{given}: online RL options; add --online (or online: true in the config)")
    if not online:
        from agenttrainer.trainers.grpo import GRPOTrainer

        _run(GRPOTrainer, _offline_config(GRPOConfig, config_file, values, lines))
        return
    from agenttrainer.online import OnlineRLTrainer

    config = _build(OnlineRLConfig, config_file, values, lines)
    if not config.env_id or not config.tasks_file:
        raise click.UsageError("--online needs --env (a registered environment id) and --tasks (tasks JSONL)")
    _run(OnlineRLTrainer, config)


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

    _run(PRMTrainer, _offline_config(PRMConfig, config_file, *_config_values(config_file, flags)))


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
@_config_options(RetrieverConfig)
def retriever_command(config_file: str | None, **flags: Any) -> None:
    """Fine-tune a tool-retrieval encoder contrastively (in-batch and BM25-mined hard negatives);
    prints a JSON report with recall@5 / MRR before and after on held-out pairs (extra: retriever)."""
    from agenttrainer.retrieval import train_retriever

    click.echo(json.dumps(train_retriever(_build(RetrieverConfig, config_file, *_config_values(config_file, flags)))))


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


def main(argv: Sequence[str] | None = None) -> int:
    quiet_library_warnings()
    return run(cli, argv, prog_name="knowlyr-trainer")


if __name__ == "__main__":
    raise SystemExit(main())
