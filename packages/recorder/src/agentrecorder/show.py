"""Render a trajectory as readable terminal text (``knowlyr-recorder show``).

Long texts are clipped to ``max_lines`` lines (with a note of how much was left out) so a
50-step coding episode fits on a few screens; parameters are shown as compact JSON, or as
the raw text for single-string parameters such as a bash command.

Example:
    >>> from knowlyrcore.trajectory import Step, ToolCall, Trajectory
    >>> print(render(Trajectory(id="t", steps=[Step(index=0, tool_call=ToolCall(name="bash", parameters={"command": "ls"}))])).splitlines()[3])
    [0] bash
"""

from __future__ import annotations

import json
from typing import Any

from knowlyrcore.trajectory import Trajectory


def clip(text: str, max_lines: int, max_chars: int | None = None) -> str:
    """``text`` shortened to ``max_lines`` lines / ``max_chars`` (default 200 per line), saying what was cut.

    Example:
        >>> clip("a\\nb\\nc", 2)
        'a\\nb\\n[... 1 more line]'
    """
    max_chars = max_chars if max_chars is not None else 200 * max_lines
    lines = text.splitlines()
    kept = lines[:max_lines]
    out = "\n".join(kept)
    if len(out) > max_chars:
        out = out[:max_chars] + f" [... {len(text) - max_chars} more chars]"
    elif len(lines) > max_lines:
        more = len(lines) - max_lines
        out += f"\n[... {more} more line{'s' if more > 1 else ''}]"
    return out


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines()) if text else prefix.rstrip()


def format_parameters(parameters: dict[str, Any]) -> str:
    """A one-value string parameter as itself, anything else as JSON."""
    if len(parameters) == 1:
        (value,) = parameters.values()
        if isinstance(value, str):
            return f"{next(iter(parameters))}: {value}"
    return json.dumps(parameters, ensure_ascii=False, indent=None if len(str(parameters)) < 100 else 2)


def render(trajectory: Trajectory, *, max_lines: int = 12) -> str:
    """The whole trajectory as text: header, task, every step, outcome."""
    t = trajectory
    out = [f"trajectory {t.id or '(no id)'}  agent={t.agent or '-'}  model={t.model or '-'}  steps={len(t.steps)}"]
    if t.source:
        out.append(f"source: {t.source}")
    out.append("task: " + (clip(t.task.description, max_lines) or "(none)"))
    for step in t.steps:
        head = f"\n[{step.index}] {step.tool_call.name}"
        if step.duration_s is not None:
            head += f"  ({step.duration_s:.2f}s)"
        if step.metadata.get("agent"):
            head += f"  by {step.metadata['agent']}"
        out.append(head)
        if step.thought:
            out.append("  thought:")
            out.append(_indent(clip(step.thought, max_lines)))
        out.append("  call:")
        out.append(_indent(clip(format_parameters(step.tool_call.parameters), max_lines)))
        obs = step.observation
        label = "  observation" + (f" (exit {obs.exit_code})" if obs.exit_code is not None else "") + ":"
        out.append(label)
        out.append(_indent(clip(obs.output, max_lines)))
        if obs.error:
            out.append("  error: " + clip(obs.error, 3))
    o = t.outcome
    verdict = {True: "success", False: "failure", None: "not judged"}[o.success]
    parts = [verdict]
    if o.score is not None:
        parts.append(f"score {o.score:g}")
    if o.exit_status:
        parts.append(f"exit {o.exit_status}")
    if o.patch:
        parts.append(f"patch {len(o.patch.splitlines())} lines")
    out.append("\noutcome: " + ", ".join(parts))
    if t.usage is not None:
        u = t.usage
        out.append(
            f"usage: prompt {u.prompt_tokens}, completion {u.completion_tokens}, total {u.total_tokens}, "
            f"cost {u.cost_usd}, calls {u.api_calls}"
        )
    return "\n".join(out)
