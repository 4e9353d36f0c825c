"""``Pipeline``: agent logs or trajectories in, training datasets out, in one call.

The stages are the packages' own: knowlyr-recorder converts framework logs (OpenHands,
SWE-agent, mini-swe-agent, OpenAI chats, …), knowlyr trajectory JSONL files pass through as
they are, knowlyr-reward scores every step, the content hash drops duplicate episodes, and
``DatasetExporter`` writes SFT, DPO and GRPO files (SFT from the successful trajectories only,
unless ``include_failures``).

Each run writes into a fresh run directory, ``<output>/run-<UTC time>-<id>/`` holding
``trajectories.jsonl``, ``scored.jsonl``, ``sft.jsonl``, ``dpo.jsonl``, ``grpo.jsonl`` and
``manifest.json``. The run is built as a hidden ``.run-….partial`` directory and renamed
when complete, and ``<output>/latest`` is then pointed at it (an atomic symlink swap), so a
crash or ``kill -9`` never leaves a mix of two runs behind; the next run deletes the partial
directories of killed runs (a lock file keeps two runs from writing at once).

Bad input: by default the first bad file or record stops the run (``path:line: problem``)
with nothing written. With ``skip_invalid`` bad records are reported (``report.errors``)
and skipped, record by record, and the good ones kept. A run that reads no usable
trajectory raises ``PipelineError`` either way.

    knowlyr-hub pipeline logs/ -o datasets/ --domain coding [--skip-invalid]
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowlyrcore import KnowlyrError, Trajectory, write_trajectories
from knowlyrcore.errors import DataFormatError, MissingExtraError, require_extra
from knowlyrcore.jsonl import read_trajectories, write_bytes_atomic
from trajectoryhub.dedup import dedup
from trajectoryhub.export import DatasetExporter

#: a run directory is ``.run-<id>.partial`` until it is complete
_PARTIAL_PREFIX, _PARTIAL_SUFFIX = ".run-", ".partial"
#: files whose hidden ``.<name>.<random>.tmp`` leftovers a run may delete from the output folder
_OUR_FILES = ("trajectories.jsonl", "scored.jsonl", "sft.jsonl", "dpo.jsonl", "grpo.jsonl", "latest")


class PipelineError(KnowlyrError, ValueError):
    """The pipeline read nothing usable, or cannot write its output directory."""


@dataclass
class PipelineReport:
    converted: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    trajectories: int = 0
    duplicates: int = 0
    scored: int = 0
    exports: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_dir: str = ""


class Pipeline:
    """Convert -> score -> deduplicate -> export. ``domain=None`` uses each task's own domain;
    ``include_failures`` puts failed and unjudged trajectories into the SFT file too."""

    def __init__(
        self,
        *,
        domain: str | None = None,
        log_format: str = "auto",
        skip_invalid: bool = False,
        formats: tuple[str, ...] = ("sft", "dpo", "grpo"),
        min_margin: float = 0.1,
        include_failures: bool = False,
    ):
        unknown = set(formats) - {"sft", "dpo", "grpo"}
        if unknown:
            raise ValueError(f"unknown export format(s) {sorted(unknown)}; use sft, dpo, grpo")
        self.domain = domain
        self.log_format = log_format
        self.skip_invalid = skip_invalid
        self.formats = formats
        self.min_margin = min_margin
        self.include_failures = include_failures

    def convert(self, inputs: list[str | os.PathLike], report: PipelineReport) -> list[Trajectory]:
        """Every usable trajectory of ``inputs``; bad files and records go to ``report.errors``
        (``skip_invalid``) or raise."""
        try:
            from agentrecorder.convert import FileResult, expand_inputs, is_trajectory_file, iter_convert
        except ImportError as exc:
            raise MissingExtraError("the pipeline's convert stage", "knowlyr-hub", "recorder") from exc

        def report_error(exc: DataFormatError) -> None:
            report.errors.append(str(exc))

        on_error = report_error if self.skip_invalid else None
        files = expand_inputs(inputs)
        trajectories: list[Trajectory] = []
        formats: set[str] = set()
        for path in files:
            kept = 0
            result = FileResult(path, format="knowlyr")
            try:
                if self.log_format == "auto" and is_trajectory_file(path):
                    items = read_trajectories(path, on_error=on_error)
                else:
                    items = iter_convert(path, self.log_format, result=result, on_error=on_error)
                for trajectory in items:  # the models refuse NaN/Infinity, so these are finite
                    trajectories.append(trajectory)
                    kept += 1
            except DataFormatError as exc:  # a file that cannot be read at all
                if on_error is None:
                    raise
                on_error(exc)
                continue
            if kept:
                formats.add(result.format)
        report.converted = {"files": len(files), "formats": sorted(formats), "trajectories": len(trajectories)}
        if not trajectories:
            first = f": {report.errors[0]}" if report.errors else ""
            raise PipelineError(f"no usable trajectory in {len(files)} input file(s){first}")
        return trajectories

    def score(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        RewardEngine = require_extra("agentreward", "knowlyr-hub", "reward", "the pipeline's score stage").RewardEngine
        engine = RewardEngine(domain=self.domain)
        return [engine.score(t) for t in trajectories]

    def run(self, inputs: list[str | os.PathLike], output_dir: str | os.PathLike) -> PipelineReport:
        """Run every stage into a fresh run directory under ``output_dir``; return the report."""
        out = Path(output_dir)
        report = PipelineReport()
        trajectories = self.convert(inputs, report)  # bad input fails before anything is written
        out.mkdir(parents=True, exist_ok=True)
        with _lock(out):
            _remove_partial_runs(out)
            run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)
            partial = out / f"{_PARTIAL_PREFIX}{run_id}{_PARTIAL_SUFFIX}"
            partial.mkdir()
            try:
                self._stages(trajectories, partial, report)
                final = out / f"run-{run_id}"
                report.run_dir = str(final)
                manifest = {"run_id": run_id, "inputs": [str(i) for i in inputs], **asdict(report)}
                manifest["exports"] = {k: {**v, "path": Path(v["path"]).name} for k, v in report.exports.items()}
                write_bytes_atomic(partial / "manifest.json", json.dumps(manifest, indent=2).encode() + b"\n")
                os.replace(partial, final)  # the run appears whole or not at all
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            report.exports = {k: {**v, "path": str(final / Path(v["path"]).name)} for k, v in report.exports.items()}
            _point_latest(out, final.name)
        return report

    def _stages(self, trajectories: list[Trajectory], run_dir: Path, report: PipelineReport) -> None:
        unique = list(dedup(trajectories))
        report.trajectories, report.duplicates = len(unique), len(trajectories) - len(unique)
        write_trajectories(run_dir / "trajectories.jsonl", unique)
        scored = self.score(unique)
        report.scored = len(scored)
        write_trajectories(run_dir / "scored.jsonl", scored)
        exporter = DatasetExporter(trajectories=scored)
        for fmt in self.formats:
            target = run_dir / f"{fmt}.jsonl"
            if fmt == "sft":
                result = exporter.export_sft(target, include_failures=self.include_failures)
            elif fmt == "dpo":
                result = exporter.export_dpo(target, min_margin=self.min_margin)
            else:
                result = exporter.export_grpo(target)
            report.exports[fmt] = {"path": str(target), "written": result.written, "skipped": result.skipped}


@contextmanager
def _lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<output>/.pipeline.lock`` for the length of a run."""
    with open(out / ".pipeline.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PipelineError(f"{out}: another pipeline run is writing here") from None
        yield  # the lock ends when the file is closed


def _remove_partial_runs(out: Path) -> None:
    """Delete what killed runs left: partial run directories, and the hidden temp files of
    outputs written straight into ``out`` by earlier versions. Called with the lock held."""
    for entry in out.iterdir():
        name = entry.name
        if name.startswith(_PARTIAL_PREFIX) and name.endswith(_PARTIAL_SUFFIX) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        elif name.endswith(".tmp") and any(name.startswith(f".{stem}.") for stem in _OUR_FILES):
            entry.unlink(missing_ok=True)


def _point_latest(out: Path, run_name: str) -> None:
    """Make ``<output>/latest`` a symlink to the run (an atomic rename over the old link)."""
    latest = out / "latest"
    if latest.exists() and not latest.is_symlink():
        return  # something of the user's: leave it
    tmp = out / f".latest.{secrets.token_hex(4)}.tmp"
    os.symlink(run_name, tmp)
    os.replace(tmp, latest)
