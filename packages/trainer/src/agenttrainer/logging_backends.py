"""Metric sinks: a JSONL file always, plus wandb (offline) and TensorBoard when asked for.

Keys are namespaced (``loss/…``, ``train/…``, ``eval/…``, ``rewards/…``). Only the main process logs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from knowlyrcore.errors import require_extra


class MetricsLogger:
    def __init__(
        self, output_dir: str | Path, report_to: list[str], *, run_name: str, config: dict[str, Any], enabled: bool
    ):
        self.enabled = enabled
        self._wandb = self._tb = None
        self._file = None
        if not enabled:
            return
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        self._file = (out / "metrics.jsonl").open("a", encoding="utf-8")
        if "tensorboard" in report_to:
            writers = require_extra(
                "torch.utils.tensorboard", "knowlyr-trainer", "tensorboard", "report_to tensorboard"
            )
            self._tb = writers.SummaryWriter(log_dir=str(out / "tensorboard"))
        if "wandb" in report_to:
            wandb = require_extra("wandb", "knowlyr-trainer", "wandb", "report_to wandb")
            # Offline and quiet unless the user's environment says otherwise; passed as arguments,
            # not written into os.environ, so the defaults do not leak into the rest of the process.
            silent = os.environ.get("WANDB_SILENT", "true").lower() in ("1", "true", "yes")
            self._wandb = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "knowlyr-trainer"),
                name=run_name,
                dir=str(out),
                config=config,
                mode=os.environ.get("WANDB_MODE", "offline"),
                reinit="finish_previous",
                settings=wandb.Settings(silent=silent),
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        self._file.write(json.dumps({"step": step, **metrics}) + "\n")
        self._file.flush()
        if self._tb is not None:
            for k, v in metrics.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
