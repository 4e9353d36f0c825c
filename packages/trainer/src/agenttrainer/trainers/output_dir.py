"""Checks a run makes before it loads anything: where it writes, and whether its extras are installed.

``claim_output_dir`` refuses an ``output_dir`` that holds the input model (``dpo --model
./output/sft/final --output-dir ./output/sft`` would write over the weights it trains from) and a
non-empty directory that another recipe's run wrote (``trainer_run.json`` records the recipe)
unless ``overwrite`` is set; a run of the same recipe may write there again (resuming does).
``check_extras`` names a missing extra in one line before anything loads (it used to fail with a
traceback after the model had loaded).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from agenttrainer.config import ConfigError, RunConfig
from knowlyrcore.errors import MissingExtraError

RUN_FILE = "trainer_run.json"  # {"recipe": "sft"} in every output_dir a trainer wrote into


def _input_models(config: RunConfig) -> list[str]:
    names = [config.model_name_or_path, getattr(config, "ref_model_name_or_path", None)]
    return [n for n in names if n]


def recorded_recipe(output_dir: str | Path) -> str | None:
    """The recipe that last trained into ``output_dir``, or None when none recorded one."""
    try:
        return json.loads((Path(output_dir) / RUN_FILE).read_text()).get("recipe")
    except (OSError, ValueError, AttributeError):
        return None


def check_output_dir(config: RunConfig) -> None:
    """Raise a one-line ``ConfigError`` when ``config.output_dir`` holds an input model, or holds a
    run of another recipe and ``config.overwrite`` is not set. Writes nothing."""
    out = Path(config.output_dir).expanduser().resolve()
    for name in _input_models(config):
        path = Path(name).expanduser()
        if not path.exists():
            continue  # an alias or a Hub id: not under output_dir
        path = path.resolve()
        if path == out or out in path.parents:
            raise ConfigError(
                f"output_dir {config.output_dir} holds the input model {name}; training would write over it "
                f"(pass another --output-dir, e.g. ./output/{config.recipe})"
            )
    previous = recorded_recipe(out)
    if previous and previous != config.recipe and not config.overwrite and any(out.iterdir()):
        raise ConfigError(
            f"output_dir {config.output_dir} holds a {previous} run; pass another --output-dir "
            f"(default ./output/{config.recipe}) or --overwrite to write this {config.recipe} run there"
        )


def claim_output_dir(config: RunConfig, *, main_process: bool = True) -> Path:
    """:func:`check_output_dir`, then record ``config.recipe`` in the directory (main process only)."""
    check_output_dir(config)
    out = Path(config.output_dir)
    if main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_FILE).write_text(json.dumps({"recipe": config.recipe}) + "\n")
    return out


def check_extras(config: RunConfig) -> None:
    """A one-line ``MissingExtraError`` (exit 2) naming the extra to install when the config needs a
    package that is not installed; called before anything is loaded."""
    if config.lora.use_lora and not _importable("peft"):
        raise MissingExtraError("use_lora", "knowlyr-trainer", "peft", module="peft")
    for sink in config.report_to:  # wandb, tensorboard: extra, module and sink share the name
        if not _importable(sink):
            raise MissingExtraError(f"report_to {sink}", "knowlyr-trainer", sink, module=sink)


def _importable(module: str) -> bool:
    if module in sys.modules:  # None there means "import fails" (also how tests hide a package)
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None
