"""A self-contained HTML page of a trajectory (``knowlyr-recorder view``).

One file, no scripts or external assets, so it opens from disk, in a browser without
network, or as a CI artifact: the task, the outcome, then every step as a ``<section>``
with its thought, the tool call (name and parameters) and the observation folded in a
``<details>`` element (long outputs stay collapsed until clicked). Everything from the log
is HTML-escaped.

Example:
    >>> from knowlyrcore.trajectory import Step, ToolCall, Trajectory
    >>> page = render_html(Trajectory(steps=[Step(index=0, tool_call=ToolCall(name="<b>"))]))
    >>> 'data-tool="&lt;b&gt;"' in page and "<script" not in page
    True
"""

from __future__ import annotations

import json
from html import escape

from knowlyrcore.trajectory import Step, Trajectory

_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header,main{max-width:980px;margin:0 auto;padding:16px 20px}
header{background:#1d2330;color:#fff;max-width:none}
header h1{font-size:18px;margin:0 0 4px}
.meta{color:#b8c0d0;font-size:13px}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px 16px;margin:12px 0}
.outcome.ok{border-left:6px solid #2d9d5a}.outcome.bad{border-left:6px solid #d0463b}.outcome.none{border-left:6px solid #9aa3b2}
.step h2{font-size:15px;margin:0 0 6px}.step h2 .tool{font-family:ui-monospace,monospace;background:#eef1f6;padding:1px 6px;border-radius:4px}
.badge{font-size:12px;color:#5b6475;margin-left:8px}
.thought{white-space:pre-wrap;color:#39414f;margin:4px 0 8px}
pre{background:#f3f4f7;border-radius:6px;padding:8px;overflow:auto;max-height:480px;margin:4px 0;white-space:pre-wrap;word-break:break-word}
details summary{cursor:pointer;color:#3a5fa0}
.err{color:#b3261e}
.task pre{max-height:240px}
"""


def _pre(text: str, cls: str = "") -> str:
    return f'<pre class="{cls}">{escape(text)}</pre>' if cls else f"<pre>{escape(text)}</pre>"


def _step_html(step: Step) -> str:
    badges = []
    if step.duration_s is not None:
        badges.append(f"{step.duration_s:.2f}s")
    if step.observation.exit_code is not None:
        badges.append(f"exit {step.observation.exit_code}")
    if step.metadata.get("agent"):
        badges.append(f"by {step.metadata['agent']}")
    if step.reward is not None:
        badges.append(f"reward {step.reward:g}")
    badge_html = "".join(f'<span class="badge">{escape(str(b))}</span>' for b in badges)
    parts = [
        f'<section class="card step" id="step-{step.index}" data-index="{step.index}" '
        f'data-tool="{escape(step.tool_call.name)}">',
        f'<h2>Step {step.index} <span class="tool">{escape(step.tool_call.name)}</span>{badge_html}</h2>',
    ]
    if step.thought:
        parts.append(f'<div class="thought">{escape(step.thought)}</div>')
    params = json.dumps(step.tool_call.parameters, ensure_ascii=False, indent=2)
    parts.append(f'<div class="call">{_pre(params, "params")}</div>')
    output = step.observation.output
    lines = len(output.splitlines())
    parts.append(
        f'<details class="observation"><summary>Observation ({lines} line{"s" if lines != 1 else ""}, '
        f"{len(output)} chars)</summary>{_pre(output)}</details>"
    )
    if step.observation.error:
        parts.append(f'<div class="err">error: {escape(step.observation.error)}</div>')
    parts.append("</section>")
    return "\n".join(parts)


def render_html(trajectory: Trajectory) -> str:
    """The page as a string."""
    t = trajectory
    o = t.outcome
    verdict, cls = {True: ("Success", "ok"), False: ("Failure", "bad"), None: ("Not judged", "none")}[o.success]
    facts = [f"<strong>{verdict}</strong>"]
    if o.score is not None:
        facts.append(f"score {o.score:g}")
    if o.exit_status:
        facts.append(f"exit status {escape(o.exit_status)}")
    if t.usage is not None:
        u = t.usage
        facts.append(f"tokens {u.total_tokens if u.total_tokens is not None else '-'}")
        if u.cost_usd is not None:
            facts.append(f"cost ${u.cost_usd:g}")
    patch = f"<details><summary>Patch</summary>{_pre(o.patch)}</details>" if o.patch else ""
    title = f"Trajectory {t.id}" if t.id else "Trajectory"
    meta = " · ".join(
        escape(x)
        for x in (
            f"agent {t.agent}" if t.agent else "",
            f"model {t.model}" if t.model else "",
            f"{len(t.steps)} steps",
            t.source or "",
        )
        if x
    )
    steps_html = "\n".join(_step_html(s) for s in t.steps)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>
<body>
<header><h1>{escape(title)}</h1><div class="meta">{meta}</div></header>
<main>
<div class="card task"><details open><summary>Task {escape(t.task.id)}</summary>{_pre(t.task.description)}</details></div>
<div class="card outcome {cls}" id="outcome">{" · ".join(facts)}{patch}</div>
<div id="steps" data-count="{len(t.steps)}">
{steps_html}
</div>
</main></body></html>
"""
