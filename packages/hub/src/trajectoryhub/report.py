"""Evaluation reports: ``report.json``, ``report.md``, a self-contained ``report.html`` and PNG plots.

``write_report(report, out_dir)`` takes the report dict the evaluation produced::

    {"stages": [summarize_stage(...), ...],     # name, split, n, success_rate, ci95, mean_reward, metrics
     "comparisons": compare_stages(...),        # may be empty
     "seconds": 12.3,                           # wall time of the evaluation
     "tables": [{"title": ..., "header": [...], "rows": [[...], ...], "note": ...}],  # optional
     ...}                                       # anything else JSON-able (policy, env, tasks file)

and writes, each file atomically (temporary file + rename):

* ``success.png``: success rate per stage with its Wilson 95% interval as error bars;
* ``curve_<metric>.png`` when ``curves`` is given (``{"sft/loss": [(step, value), ...]}``): one
  plot per metric name after the last ``/`` (every stage's ``loss`` on one plot);
* ``report.json``: the report plus ``plots`` (id -> file) and the curves;
* ``report.md``: the stage and comparison tables, then each of ``tables`` (sampled evaluation,
  per-template success, what each stage cost, ... as the caller builds them), linking the plots;
* ``report.html``: the same tables, the plots embedded as base64 ``<img>`` (each with an ``id``
  and alt text), and one example trajectory per stage (from ``trajectories_by_stage``) as a
  list of steps. Every text that came from a model or an environment is HTML-escaped.

Plots need matplotlib (``pip install 'knowlyr-hub[report]'``); they are drawn on matplotlib's
Agg canvas without pyplot, so no global backend state changes.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from knowlyrcore import Trajectory
from knowlyrcore.jsonl import write_bytes_atomic

METRIC_LABELS = {
    "tool_selection_accuracy": "tool selection",
    "plan_success_rate": "plan success",
    "step_efficiency": "step efficiency",
    "timing_precision": "timing precision",
    "timing": "env time (s)",
}
OBSERVATION_CHARS = 2000  # an example step shows at most this much of its observation


def write_report(
    report: Mapping[str, Any],
    out_dir: str | os.PathLike,
    *,
    trajectories_by_stage: Mapping[str, Sequence[Trajectory]] | None = None,
    curves: Mapping[str, Sequence[Sequence[float]]] | None = None,
) -> dict[str, Path]:
    """Write the report files into ``out_dir``; return ``{kind: path}`` of everything written."""
    stages = report.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ValueError("a report needs a non-empty 'stages' list")
    for stage in stages:
        missing = [k for k in ("name", "n", "success_rate", "ci95") if k not in stage]
        if missing:
            raise ValueError(f"stage {stage.get('name', '?')!r} lacks {', '.join(missing)}")
    for table in report.get("tables", []):
        header, rows = table.get("header"), table.get("rows")
        if not table.get("title") or not header or any(len(row) != len(header) for row in rows or []):
            raise ValueError(f"table {table.get('title', '?')!r} needs a title, a header and rows as wide as it")
    series = {key: [(float(x), float(y)) for x, y in points] for key, points in (curves or {}).items()}
    for key, points in series.items():
        if not points or not all(math.isfinite(v) for point in points for v in point):
            raise ValueError(f"curve {key!r} needs finite (step, value) points")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    pngs = {"plot-success": ("success.png", _success_png(stages), "Success rate per stage with Wilson 95% intervals")}
    by_metric: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for key, points in series.items():
        by_metric.setdefault(key.rsplit("/", 1)[-1], {})[key] = points
    for metric, lines in by_metric.items():
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", metric)
        pngs[f"plot-curve-{slug}"] = (f"curve_{slug}.png", _curve_png(metric, lines),
                                      f"{metric} per training step: {', '.join(lines)}")  # fmt: skip

    written: dict[str, Path] = {}
    for plot_id, (filename, data, _) in pngs.items():
        written[plot_id] = write_bytes_atomic(out / filename, data)
    full = {**report, "comparisons": list(report.get("comparisons", [])),
            "plots": {plot_id: filename for plot_id, (filename, _, _) in pngs.items()},
            "curves": {key: [list(p) for p in points] for key, points in series.items()}}  # fmt: skip
    written["json"] = write_bytes_atomic(out / "report.json", (json.dumps(full, indent=2) + "\n").encode())
    written["markdown"] = write_bytes_atomic(out / "report.md", _markdown(full, pngs).encode())
    written["html"] = write_bytes_atomic(out / "report.html", _html(full, pngs, trajectories_by_stage or {}).encode())
    return written


# --- plots ---------------------------------------------------------------------------------------


def require_matplotlib() -> None:
    """Raise a clear ``ImportError`` now if the plots cannot be drawn (before hours of evaluation)."""
    try:
        import matplotlib.backends.backend_agg
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise ImportError("report plots need matplotlib: pip install 'knowlyr-hub[report]'") from exc


def _figure():
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 3.6), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _success_png(stages: list[dict[str, Any]]) -> bytes:
    figure = _figure()
    ax = figure.add_subplot()
    rates = [float(s["success_rate"]) for s in stages]
    below = [max(0.0, r - float(s["ci95"][0])) for r, s in zip(rates, stages)]
    above = [max(0.0, float(s["ci95"][1]) - r) for r, s in zip(rates, stages)]
    ax.bar(range(len(stages)), rates, yerr=[below, above], capsize=6, color="#4c72b0")
    ax.set_xticks(range(len(stages)), [f"{s['name']}\n{r:.0%} of {s['n']}" for r, s in zip(rates, stages)])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate")
    ax.set_title("Success per stage (Wilson 95% CI)")
    return _png(figure)


def _curve_png(metric: str, lines: dict[str, list[tuple[float, float]]]) -> bytes:
    figure = _figure()
    ax = figure.add_subplot()
    for key, points in lines.items():
        ax.plot([x for x, _ in points], [y for _, y in points], label=key, marker="." if len(points) < 30 else None)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} curves")
    ax.legend()
    return _png(figure)


# --- tables ---------------------------------------------------------------------------------------


def _metric_cell(summary: Mapping[str, Any] | None) -> str:
    if not summary or not summary.get("count"):
        return "–"
    return f"{summary['mean']:.3f} ± {summary['std']:.3f} ({summary['count']})"


def stage_table(stages: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The header and text cells of the stage summary table (the report's and the CLI's)."""
    header = ["stage", "split", "n", "success", "95% CI", "mean reward", *METRIC_LABELS.values()]
    rows = []
    for s in stages:
        metrics = s.get("metrics", {})
        reward = s.get("mean_reward")
        rows.append([str(s["name"]), str(s.get("split", "")), str(s["n"]), f"{s['success_rate']:.1%}",
                     f"[{s['ci95'][0]:.1%}, {s['ci95'][1]:.1%}]", "–" if reward is None else f"{reward:.3f}",
                     *(_metric_cell(metrics.get(key)) for key in METRIC_LABELS)])  # fmt: skip
    return header, rows


def _comparison_table(comparisons: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["a → b", "pairs", "Δ success", "McNemar p", "Δ reward", "t-test p", "Wilcoxon p", "significant"]
    rows = []
    for c in comparisons:
        rows.append([f"{c['a']} → {c['b']}", str(c["n_pairs"]), f"{c['diff']:+.1%}",
                     _p(c, "p_value"), f"{c['reward_diff']:+.3f}", _p(c, "reward_p_ttest"),
                     _p(c, "reward_p_wilcoxon"), "yes" if c.get("significant") else "no"])  # fmt: skip
    return header, rows


def _p(row: Mapping[str, Any], key: str) -> str:
    adjusted = row.get(f"{key}_bonferroni")
    return f"{row[key]:.3g}" + ("" if adjusted is None else f" ({adjusted:.3g})")


def _run_facts(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    facts = [(k, v) for k, v in report.items() if isinstance(v, (str, int, float, bool)) and k != "seconds"]
    if isinstance(report.get("seconds"), (int, float)):
        facts.append(("seconds", f"{report['seconds']:.1f}"))
    return [(str(k), str(v)) for k, v in facts]


_COMPARISON_NOTE = ("Δ is b − a on episodes paired by task id; p-values are two-sided, Bonferroni-corrected "
                    "over all pairs in parentheses; significant means corrected McNemar p < alpha.")  # fmt: skip


def _markdown(report: dict[str, Any], pngs: dict[str, tuple[str, bytes, str]]) -> str:
    def table(header: list[str], rows: list[list[str]]) -> list[str]:
        def line(cells: list[str]) -> str:
            return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

        return [line(header), "|" + "---|" * len(header), *map(line, rows)]

    lines = ["# Evaluation report", ""]
    lines += [f"- {k}: {v}" for k, v in _run_facts(report)] + [""]
    lines += ["## Stages", "", *table(*stage_table(report["stages"])), ""]
    lines.append("Metrics are mean ± std (episodes scored); see `trajectoryhub.evaluate` for definitions.")
    if report["comparisons"]:
        lines += ["", "## Comparisons", "", *table(*_comparison_table(report["comparisons"])), "", _COMPARISON_NOTE]
    for extra in report.get("tables", []):
        lines += ["", f"## {extra['title']}", "", *table(extra["header"], _texts(extra["rows"]))]
        lines += ["", extra["note"]] if extra.get("note") else []
    lines += ["", "## Plots", ""]
    lines += [f"![{alt}]({filename})" for filename, _, alt in pngs.values()]
    return "\n".join(lines) + "\n"


def _texts(rows: Sequence[Sequence[Any]]) -> list[list[str]]:
    return [["–" if cell is None else str(cell) for cell in row] for row in rows]


def _html_table(header: list[str], rows: list[list[str]], table_id: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _html_trajectory(name: str, trajectory: Trajectory) -> str:
    e = html.escape
    outcome = {True: "success", False: "failure", None: "not judged"}[trajectory.outcome.success]
    items = []
    for step in trajectory.steps:
        params = json.dumps(step.tool_call.parameters, ensure_ascii=False)
        output = step.observation.output
        if len(output) > OBSERVATION_CHARS:
            output = output[:OBSERVATION_CHARS] + f"… [{len(step.observation.output) - OBSERVATION_CHARS} more chars]"
        thought = f'<div class="thought">{e(step.thought)}</div>' if step.thought else ""
        error = f'<div class="error">error: {e(step.observation.error)}</div>' if step.observation.error else ""
        reward = "" if step.reward is None else f' <span class="reward">reward {step.reward:.3f}</span>'
        items.append(f"<li>{thought}<code class=\"call\">{e(step.tool_call.name)}({e(params)})</code>{reward}"
                     f"<pre>{e(output)}</pre>{error}</li>")  # fmt: skip
    return (f'<section class="example"><h3>{e(name)}: task {e(trajectory.task.id or "?")} ({outcome}, '
            f"{len(trajectory.steps)} steps)</h3><p>{e(trajectory.task.description)}</p>"
            f'<ol class="steps">{"".join(items)}</ol></section>')  # fmt: skip


_CSS = """body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}img{max-width:100%}figure{margin:1rem 0}
pre{background:#f6f6f6;padding:.4rem;white-space:pre-wrap;overflow-wrap:anywhere;max-height:12rem;overflow:auto}
.thought{color:#555;font-style:italic}.error{color:#b00}.call{font-weight:bold}"""


def _html(report: dict[str, Any], pngs: dict[str, tuple[str, bytes, str]], examples: Mapping[str, Any]) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>Evaluation report</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>Evaluation report</h1><ul>"]  # fmt: skip
    parts += [f"<li>{e(k)}: {e(v)}</li>" for k, v in _run_facts(report)]
    parts += ["</ul><h2>Stages</h2>", _html_table(*stage_table(report["stages"]), "stages")]
    parts.append("<p>Metrics are mean ± std (episodes scored).</p>")
    if report["comparisons"]:
        parts += ["<h2>Comparisons</h2>", _html_table(*_comparison_table(report["comparisons"]), "comparisons")]
        parts.append(f"<p>{e(_COMPARISON_NOTE)}</p>")
    for n, extra in enumerate(report.get("tables", [])):
        parts += [f"<h2>{e(extra['title'])}</h2>", _html_table(extra["header"], _texts(extra["rows"]), f"table-{n}")]
        parts += [f"<p>{e(extra['note'])}</p>"] if extra.get("note") else []
    parts.append("<h2>Plots</h2>")
    for plot_id, (filename, data, alt) in pngs.items():
        encoded = base64.b64encode(data).decode("ascii")
        parts.append(f'<figure><img id="{plot_id}" alt="{e(alt)}" src="data:image/png;base64,{encoded}">'
                     f"<figcaption>{e(alt)} ({e(filename)})</figcaption></figure>")  # fmt: skip
    shown = [(name, items[0]) for name, items in examples.items() if items]
    if shown:
        parts.append("<h2>Example trajectories</h2>")
        parts += [_html_trajectory(name, trajectory) for name, trajectory in shown]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
