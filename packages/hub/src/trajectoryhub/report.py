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
* ``report.md``: a headline (``headline``: the first comparison in one sentence, worded by its
  direction and significance; without a comparison, the first stage's success), the stage and
  comparison tables, then each of ``tables`` (sampled evaluation, per-template success, what
  each stage cost, ... as the caller builds them), linking the plots, and a glossary of every
  metric and test the report shows;
* ``report.html``: the same, the plots embedded as base64 ``<img>`` (each with an ``id``
  and alt text), and one example trajectory per stage (from ``trajectories_by_stage``) as a
  list of steps, tool arguments with their real line breaks. Every text that came from a model
  or an environment is HTML-escaped.

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
from knowlyrcore.errors import require_extra
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
        pngs[f"plot-curve-{slug}"] = (
            f"curve_{slug}.png",
            _curve_png(metric, lines),
            f"{metric} per training step: {', '.join(lines)}",
        )

    written: dict[str, Path] = {}
    for plot_id, (filename, data, _) in pngs.items():
        written[plot_id] = write_bytes_atomic(out / filename, data)
    full = {
        **report,
        "comparisons": list(report.get("comparisons", [])),
        "plots": {plot_id: filename for plot_id, (filename, _, _) in pngs.items()},
        "curves": {key: [list(p) for p in points] for key, points in series.items()},
    }
    written["json"] = write_bytes_atomic(out / "report.json", (json.dumps(full, indent=2) + "\n").encode())
    written["markdown"] = write_bytes_atomic(out / "report.md", _markdown(full, pngs).encode())
    written["html"] = write_bytes_atomic(out / "report.html", _html(full, pngs, trajectories_by_stage or {}).encode())
    return written


# --- plots ---------------------------------------------------------------------------------------


def require_matplotlib() -> None:
    """Raise ``MissingExtraError`` now if the plots cannot be drawn (before hours of evaluation)."""
    require_extra("matplotlib.backends.backend_agg", "knowlyr-hub", "report", "drawing report plots")
    require_extra("matplotlib.figure", "knowlyr-hub", "report", "drawing report plots")


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
        rows.append(
            [
                str(s["name"]),
                str(s.get("split", "")),
                str(s["n"]),
                f"{s['success_rate']:.1%}",
                f"[{s['ci95'][0]:.1%}, {s['ci95'][1]:.1%}]",
                "–" if reward is None else f"{reward:.3f}",
                *(_metric_cell(metrics.get(key)) for key in METRIC_LABELS),
            ]
        )
    return header, rows


def _comparison_table(comparisons: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["a → b", "pairs", "Δ success", "McNemar p", "Δ reward", "t-test p", "Wilcoxon p", "significant"]
    rows = []
    for c in comparisons:
        rows.append(
            [
                f"{c['a']} → {c['b']}",
                str(c["n_pairs"]),
                f"{c['diff']:+.1%}",
                _p(c, "p_value"),
                f"{c['reward_diff']:+.3f}",
                _ttest_cell(c),
                _p(c, "reward_p_wilcoxon"),
                "yes" if c.get("significant") else "no",
            ]
        )
    return header, rows


def _ttest_cell(comparison: Mapping[str, Any]) -> str:
    """The paired t-test's p, or why there is none: with one pair, or with every difference equal
    (zero variance), t is undefined and the stored p (1 or 0) is a convention, not a test."""
    if comparison["n_pairs"] < 2:
        return "n/a (one pair)"
    if comparison.get("reward_diffs_equal"):
        return f"n/a (every Δ = {comparison['reward_diff']:+.3f})"
    return _p(comparison, "reward_p_ttest")


def _p(row: Mapping[str, Any], key: str) -> str:
    adjusted = row.get(f"{key}_bonferroni")
    return f"{row[key]:.3g}" + ("" if adjusted is None else f" ({adjusted:.3g})")


def _run_facts(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    facts = [(k, v) for k, v in report.items() if isinstance(v, (str, int, float, bool)) and k != "seconds"]
    if isinstance(report.get("seconds"), (int, float)):
        facts.append(("seconds", f"{report['seconds']:.1f}"))
    return [(str(k), str(v)) for k, v in facts]


def headline(report: Mapping[str, Any]) -> str:
    """The report in one sentence: the first comparison (``b`` against ``a``, a ``compare_stages``
    row), worded by its direction and by whether McNemar's test (Bonferroni-corrected) finds it
    significant; with no comparison, the first stage's success rate."""
    comparisons = report.get("comparisons") or []
    if not comparisons:
        s = report["stages"][0]
        where = f" {s['split']}" if s.get("split") else ""
        return (
            f"{s['name']} solves {round(s['success_rate'] * s['n'])} of {s['n']}{where} tasks "
            f"({s['success_rate']:.1%}, 95% CI {s['ci95'][0]:.1%}–{s['ci95'][1]:.1%}); no comparison was run."
        )
    c = comparisons[0]
    a, b, points = c["a"], c["b"], 100 * c["diff"]
    tasks = f"{c['n_pairs']} paired{' ' + c['split'] if c.get('split') else ''} tasks"
    test = f"McNemar p = {c['p_value']:.3g}"
    if c.get("n_comparisons", 1) > 1:
        test += f", {c['p_value_bonferroni']:.3g} after Bonferroni over {c['n_comparisons']} comparisons"
    evidence = f"{test}; {c['b_only']} tasks only {b} solved, {c['a_only']} only {a}"
    if abs(points) < 1e-9:
        return f"{b} and {a} tie at {c['success_b']:.1%} success on {tasks} ({evidence})."
    rates = f"{c['success_a']:.1%} → {c['success_b']:.1%}"
    if c.get("significant"):
        verb = "beats" if points > 0 else "is worse than"
        return f"{b} {verb} {a} by {points:+.1f} points ({rates}) on {tasks} ({test})."
    direction = "ahead of" if points > 0 else "behind"
    return (
        f"{b} is {direction} {a} by {points:+.1f} points ({rates}) on {tasks}, but the difference is "
        f"not significant ({evidence}): it may be chance."
    )


_GLOSSARY = {
    "success rate": "the share of episodes whose outcome says success; an episode nobody judged counts as "
    "not successful.",
    "95% CI": "the Wilson score interval of the success rate: the true rates consistent with the observed "
    "successes at 95% confidence. Unlike rate ± 1.96·SE it stays inside [0, 1] and is honest at small n "
    "and at rates near 0% or 100%.",
    "mean reward": "the mean over episodes of the trajectory's reward: its scored total (the step rewards "
    "summed), else the outcome score, else 1 for success and 0 for failure.",
    "tool selection": "F1 of the agent's tool calls against the expert solution's, as multisets "
    "(precision: matched / agent calls, recall: matched / expert calls).",
    "plan success": "the share of episodes in which the expert's tools appear among the agent's calls in the "
    "expert's order (other calls in between allowed).",
    "step efficiency": "expert steps / agent steps, capped at 1, over the successful episodes.",
    "timing precision": "the share of the agent's steps that answered at the right moment: it answers exactly "
    "where the expert answers, neither before nor after.",
    "env time (s)": "seconds per episode spent in the environment: the sum of the recorded step durations.",
    "mean ± std (n)": "a metric's mean and standard deviation over the n episodes it could score.",
}
_COMPARISON_GLOSSARY = {
    "Δ success": "b − a: the difference of the success rates, in percentage points, on the episodes paired by task id.",
    "McNemar p": "the exact McNemar test: only the tasks one stage solved and the other did not carry "
    'information; under "no difference" each is a fair coin flip, so p is a two-sided binomial '
    "test on them. The headline and 'significant' use it.",
    "Δ reward": "b − a: the difference of the mean rewards on the paired episodes.",
    "t-test p": "the paired t-test of the per-task reward differences. n/a when every difference is equal: zero "
    "variance leaves t undefined (no test is needed to see the difference, or its absence).",
    "Wilcoxon p": "the Wilcoxon signed-rank test of the reward differences: like the t-test without assuming "
    "normal differences; zero differences are dropped.",
    "Bonferroni": "each p multiplied by the number of comparisons (at most 1), in parentheses: the chance of "
    "any false positive among all the comparisons stays below alpha.",
    "significant": "the Bonferroni-corrected McNemar p is below alpha (0.05 unless the run says otherwise).",
}
_SAMPLED_GLOSSARY = {
    "pass@1, pass@k": "with k sampled episodes per task: pass@1 is the mean per-task success rate; pass@k the "
    "chance that at least one of k samples succeeds, by the unbiased estimator "
    "1 − C(n−c, k) / C(n, k) (n samples, c successes), averaged over tasks.",
}
_EXAMPLE_GLOSSARY = {
    "env reward, process reward": "the env reward is what the environment returned for a step (often 0 until "
    "the task is done, however right the step); a process reward scores the step "
    "itself (a reward function, or knowlyr-reward's rubrics).",
}


def glossary(report: Mapping[str, Any], *, examples: bool = False) -> list[tuple[str, str]]:
    """``(term, meaning)`` of every metric and statistic the report shows."""
    terms = dict(_GLOSSARY)
    if report.get("comparisons"):
        terms |= _COMPARISON_GLOSSARY
    texts = [str(t.get("title", "")) + " " + " ".join(map(str, t.get("header", []))) for t in report.get("tables", [])]
    if any("pass@" in text for text in texts):
        terms |= _SAMPLED_GLOSSARY
    if examples:
        terms |= _EXAMPLE_GLOSSARY
    return list(terms.items())


_COMPARISON_NOTE = (
    "Δ is b − a on episodes paired by task id; p-values are two-sided, Bonferroni-corrected "
    "over all pairs in parentheses; significant means corrected McNemar p < alpha."
)


def _markdown(report: dict[str, Any], pngs: dict[str, tuple[str, bytes, str]]) -> str:
    def table(header: list[str], rows: list[list[str]]) -> list[str]:
        def line(cells: list[str]) -> str:
            return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

        return [line(header), "|" + "---|" * len(header), *map(line, rows)]

    lines = ["# Evaluation report", "", f"**{headline(report)}**", ""]
    lines += [f"- {k}: {v}" for k, v in _run_facts(report)] + [""]
    lines += ["## Stages", "", *table(*stage_table(report["stages"])), ""]
    lines.append("Metrics are mean ± std (episodes scored); see the glossary below.")
    if report["comparisons"]:
        lines += ["", "## Comparisons", "", *table(*_comparison_table(report["comparisons"])), "", _COMPARISON_NOTE]
    for extra in report.get("tables", []):
        lines += ["", f"## {extra['title']}", "", *table(extra["header"], _texts(extra["rows"]))]
        lines += ["", extra["note"]] if extra.get("note") else []
    lines += ["", "## Plots", ""]
    lines += [f"![{alt}]({filename})" for filename, _, alt in pngs.values()]
    lines += ["", "## Glossary", ""]
    lines += [f"- **{term}**: {meaning}" for term, meaning in glossary(report)]
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
        # a string argument (a reply, a patch) as the text it is, its line breaks real, not JSON's \\n
        params = "\n".join(
            f"{key}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
            for key, value in step.tool_call.parameters.items()
        )
        output = step.observation.output
        if len(output) > OBSERVATION_CHARS:
            output = output[:OBSERVATION_CHARS] + f"… [{len(step.observation.output) - OBSERVATION_CHARS} more chars]"
        thought = f'<div class="thought">{e(step.thought)}</div>' if step.thought else ""
        error = f'<div class="error">error: {e(step.observation.error)}</div>' if step.observation.error else ""
        arguments = f'<pre class="params">{e(params)}</pre>' if params else ""
        items.append(
            f'<li>{thought}<code class="call">{e(step.tool_call.name)}</code>{_step_reward(step)}'
            f"{arguments}<pre>{e(output)}</pre>{error}</li>"
        )
    return (
        f'<section class="example"><h3>{e(name)}: task {e(trajectory.task.id or "?")} ({outcome}, '
        f'{len(trajectory.steps)} steps)</h3><p class="task">{e(trajectory.task.description)}</p>'
        f'<ol class="steps">{"".join(items)}</ol></section>'
    )


def _step_reward(step: Any) -> str:
    """The step's reward, named for what it is: the environment's own (often 0 until the task is
    done, however right the step), or a process reward (a reward function's or knowlyr-reward's
    score of the step; the environment's then rides along in ``metadata.env_reward``)."""
    if step.reward is None:
        return ""
    env_reward = step.metadata.get("env_reward")
    if env_reward is None and not step.rubric_scores:
        return f' <span class="reward">env reward {step.reward:.3f}</span>'
    text = f"process reward {step.reward:.3f}"
    if isinstance(env_reward, (int, float)):
        text += f", env reward {env_reward:.3f}"
    return f' <span class="reward">{text}</span>'


_CSS = """body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th:first-child,td:first-child{text-align:left}img{max-width:100%}figure{margin:1rem 0}
pre{background:#f6f6f6;padding:.4rem;white-space:pre-wrap;overflow-wrap:anywhere;max-height:12rem;overflow:auto}
.thought{color:#555;font-style:italic}.error{color:#b00}.call{font-weight:bold}
.thought,.task{white-space:pre-wrap}.params{background:#eef3fb}.reward{color:#555}
#headline{font-size:1.2rem;border-left:4px solid #4c72b0;padding:.4rem .8rem;background:#f4f7fc}
dt{font-weight:bold}dd{margin:0 0 .5rem 1.5rem}"""


def _html(report: dict[str, Any], pngs: dict[str, tuple[str, bytes, str]], examples: Mapping[str, Any]) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>Evaluation report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Evaluation report</h1>",
        f'<p id="headline">{e(headline(report))}</p><ul>',
    ]
    parts += [f"<li>{e(k)}: {e(v)}</li>" for k, v in _run_facts(report)]
    parts += ["</ul><h2>Stages</h2>", _html_table(*stage_table(report["stages"]), "stages")]
    parts.append('<p>Metrics are mean ± std (episodes scored); see the <a href="#glossary">glossary</a>.</p>')
    if report["comparisons"]:
        parts += ["<h2>Comparisons</h2>", _html_table(*_comparison_table(report["comparisons"]), "comparisons")]
        parts.append(f"<p>{e(_COMPARISON_NOTE)}</p>")
    for n, extra in enumerate(report.get("tables", [])):
        parts += [f"<h2>{e(extra['title'])}</h2>", _html_table(extra["header"], _texts(extra["rows"]), f"table-{n}")]
        parts += [f"<p>{e(extra['note'])}</p>"] if extra.get("note") else []
    parts.append("<h2>Plots</h2>")
    for plot_id, (filename, data, alt) in pngs.items():
        encoded = base64.b64encode(data).decode("ascii")
        parts.append(
            f'<figure><img id="{plot_id}" alt="{e(alt)}" src="data:image/png;base64,{encoded}">'
            f"<figcaption>{e(alt)} ({e(filename)})</figcaption></figure>"
        )
    shown = [(name, items[0]) for name, items in examples.items() if items]
    if shown:
        parts.append("<h2>Example trajectories</h2>")
        parts += [_html_trajectory(name, trajectory) for name, trajectory in shown]
    parts.append('<h2 id="glossary">Glossary</h2><dl>')
    parts += [f"<dt>{e(term)}</dt><dd>{e(meaning)}</dd>" for term, meaning in glossary(report, examples=bool(shown))]
    parts.append("</dl></body></html>")
    return "\n".join(parts) + "\n"
