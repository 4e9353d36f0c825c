"""``Pipeline``: agent logs or trajectories in, training datasets out, in one call.

The stages are the packages' own: knowlyr-recorder converts framework logs (OpenHands,
SWE-agent, mini-swe-agent, OpenAI chats, …; files that already hold trajectories pass
through), knowlyr-reward scores every step, the content hash drops duplicate episodes, and
``DatasetExporter`` writes SFT, DPO and GRPO files. Every stage's output is kept in the
output folder (``trajectories.jsonl``, ``scored.jsonl``, ``sft.jsonl``, ``dpo.jsonl``,
``grpo.jsonl``) and the returned report says what each stage did.

    knowlyr-hub pipeline logs/ -o datasets/ --domain coding
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowlyrcore import Trajectory, write_trajectories
from trajectoryhub.dedup import dedup
from trajectoryhub.export import DatasetExporter


@dataclass
class PipelineReport:
    converted: dict[str, Any] = field(default_factory=dict)
    trajectories: int = 0
    duplicates: int = 0
    scored: int = 0
    exports: dict[str, dict[str, Any]] = field(default_factory=dict)


class Pipeline:
    """Convert -> score -> deduplicate -> export. ``domain=None`` uses each task's own domain."""

    def __init__(self, *, domain: str | None = None, log_format: str = "auto", skip_invalid: bool = True,
                 formats: tuple[str, ...] = ("sft", "dpo", "grpo"), min_margin: float = 0.1):  # fmt: skip
        unknown = set(formats) - {"sft", "dpo", "grpo"}
        if unknown:
            raise ValueError(f"unknown export format(s) {sorted(unknown)}; use sft, dpo, grpo")
        self.domain = domain
        self.log_format = log_format
        self.skip_invalid = skip_invalid
        self.formats = formats
        self.min_margin = min_margin

    def convert(self, inputs: list[str | os.PathLike], report: PipelineReport) -> list[Trajectory]:
        try:
            from agentrecorder.convert import convert_paths
        except ImportError as exc:
            raise ImportError(
                "the pipeline's convert stage needs knowlyr-recorder: pip install 'knowlyr-hub[recorder]'"
            ) from exc
        batch, trajectories = convert_paths(inputs, None, self.log_format, skip_invalid=self.skip_invalid)
        report.converted = {
            "files": len(batch.files),
            "failed": {str(f.path): f.error for f in batch.files if f.error},
            "formats": sorted({f.format for f in batch.files if f.format}),
        }
        return trajectories

    def score(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        try:
            from agentreward import RewardEngine
        except ImportError as exc:
            raise ImportError(
                "the pipeline's score stage needs knowlyr-reward: pip install 'knowlyr-hub[reward]'"
            ) from exc
        engine = RewardEngine(domain=self.domain)
        return [Trajectory.model_validate(engine.score(t.model_dump(mode="json"))) for t in trajectories]

    def run(self, inputs: list[str | os.PathLike], output_dir: str | os.PathLike) -> PipelineReport:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        report = PipelineReport()
        trajectories = self.convert(inputs, report)
        unique = list(dedup(trajectories))
        report.trajectories, report.duplicates = len(unique), len(trajectories) - len(unique)
        write_trajectories(out / "trajectories.jsonl", unique)
        scored = self.score(unique)
        report.scored = len(scored)
        write_trajectories(out / "scored.jsonl", scored)
        exporter = DatasetExporter(trajectories=scored)
        for fmt in self.formats:
            target = out / f"{fmt}.jsonl"
            if fmt == "sft":
                result = exporter.export_sft(target)
            elif fmt == "dpo":
                result = exporter.export_dpo(target, min_margin=self.min_margin)
            else:
                result = exporter.export_grpo(target)
            report.exports[fmt] = {"path": str(target), "written": result.written, "skipped": result.skipped}
        return report
