"""Group-relative judging: one judge call scores the G rollouts of a task against each other.

An absolute judge reads each trajectory alone, and a small or uncalibrated one gives every
attempt about the same number; GRPO only uses the differences within a group, and a judge that
sees the whole group can compare its attempts directly (ART's RULER). ``RelativeJudge.score_group``
sends the task, its rubric and the G trajectories in one prompt and gets one score in [0, 1] per
trajectory; ``score_rubric`` scores one trajectory against the rubric on its own (absolute).

The prompt (user message; the system message is ``GROUP_SYSTEM_PROMPT``)::

    TASK: <the task's description>

    RUBRIC: <what a good trajectory does>

    TRAJECTORY 1:
    [0] get_order({"order_id": "#W1"}) -> {"status": "pending", ...}
    [1] cancel_order({"order_id": "#W1"}) -> cancelled
    FINAL ANSWER: Your order #W1 is cancelled.

    TRAJECTORY 2:
    FINAL ANSWER: Sorry, I cannot help with that.

    Score the 2 trajectories: {"scores": [<trajectory 1>, <trajectory 2>]}

Each trajectory is its tool calls with what each returned (observations clipped to
``observation_chars``; past ``steps_shown`` steps the first and last halves), then its final
answer (the closing tool's text: ``knowlyrcore.CLOSING_TOOLS``). The environment's verdict is not
shown: the judge is a second opinion, not a copy of the first.

The reply must hold ``{"scores": [s_1, ..., s_G]}`` (or ``{"scores": {"1": s_1, ...}}``, by the
numbers shown), read strictly: exactly G finite numbers in [0, 1] (no booleans, no 0-10 scales
guessed at). Anything else is an unusable reply: it is asked again (sampled) up to the judge's
``max_retries``, then the whole group abstains (``None`` for every trajectory) and the reason is
in ``judge.failures``. A caller adds nothing for an abstention, so a broken judge cannot reorder
a group.

Judges prefer some positions (often the first or the last). The trajectories are shown in a
seeded permutation (``seed`` and the group's content) and the scores mapped back; with
``orders=2`` the judge is asked again with that order reversed and each trajectory gets the mean
of its two scores (the mean of those that answered, when one order abstains).

Transport, deadlines, the checks on a hostile reply, retries and caching are the wrapped
``Judge``'s (``agentreward.judge``).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from agentreward.errors import JudgeError
from agentreward.judge import Judge, clip_middle, load_untrusted_json
from knowlyrcore.tool_parsing import CLOSING_TOOLS

GROUP_SYSTEM_PROMPT = (
    "You are a strict judge comparing several attempts by an AI agent at the same task. Read the TASK, the "
    "RUBRIC and every TRAJECTORY (the agent's tool calls, what each returned, and its final answer). Score each "
    "trajectory from 0 (fails the task or breaks the rubric) to 1 (meets the rubric fully). Compare them with "
    "each other: a better trajectory gets a higher score, equally good ones the same score; the order they are "
    "shown in says nothing about their quality. Answer with one JSON object and nothing else, one number in "
    '[0, 1] per trajectory in the order shown, e.g. {"scores": [0.2, 0.9, 0.5]} for three trajectories.'
)
RUBRIC_SYSTEM_PROMPT = (
    "You are a strict judge of an AI agent's work. Read the TASK, the RUBRIC and the TRAJECTORY (the agent's "
    "tool calls, what each returned, and its final answer), then score from 0 (fails the task or breaks the "
    "rubric) to 1 (meets the rubric fully) how well the trajectory meets the rubric. Answer with one JSON "
    'object and nothing else, e.g. {"score": 0.7}.'
)

# the value of the first "scores" key: a flat list or a flat object (nothing nested is a score)
_SCORES = re.compile(r'"scores"\s*:\s*(\[[^\[\]{}]*\]|\{[^\[\]{}]*\})')
_SCORE = re.compile(r'"score"\s*:\s*([^\s,}\]]+)')


def _unit_score(value: Any) -> float:
    """``value`` if it is a finite number in [0, 1] (NaN fails the comparison), else ``JudgeError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise JudgeError(f"a score must be a number in [0, 1], got {clip_middle(repr(value), 40)}")
    return float(value)


def parse_group_scores(text: str, n: int) -> list[float]:
    """The ``n`` scores of a group reply, in the order shown; ``JudgeError`` saying what is wrong.

    Example:
        >>> parse_group_scores('Ranking done. {"scores": [0.25, 1, 0]}', 3)
        [0.25, 1.0, 0.0]
        >>> parse_group_scores('{"scores": {"2": 0.5, "1": 0.75}}', 2)
        [0.75, 0.5]
        >>> parse_group_scores('{"scores": [0.5, NaN]}', 2)
        Traceback (most recent call last):
        agentreward.errors.JudgeError: a score must be a number in [0, 1], got nan
    """
    found = _SCORES.search(text or "")
    if found is None:
        raise JudgeError(f'no "scores" list or object in reply: {clip_middle(text, 160)!r}')
    scores = load_untrusted_json(found.group(1))
    if isinstance(scores, dict):
        names = [str(i) for i in range(1, n + 1)]
        if set(scores) != set(names):
            raise JudgeError(f"scores name trajectories {clip_middle(sorted(scores), 80)}, expected 1 to {n}")
        scores = [scores[name] for name in names]
    if len(scores) != n:
        raise JudgeError(f"{len(scores)} scores for {n} trajectories")
    return [_unit_score(score) for score in scores]


def parse_rubric_score(text: str) -> float:
    """The ``score`` of a one-trajectory reply; ``JudgeError`` when absent or out of [0, 1]."""
    found = _SCORE.search(text or "")
    if found is None:
        raise JudgeError(f'no "score" in reply: {clip_middle(text, 160)!r}')
    return _unit_score(load_untrusted_json(found.group(1)))


def transcript(trajectory: Any, observation_chars: int = 300, steps_shown: int = 20) -> str:
    """A trajectory (a record or a ``knowlyrcore.Trajectory``) as the judge reads it.

    Example:
        >>> print(transcript({"steps": [
        ...     {"tool_call": {"name": "get_order", "parameters": {"id": 7}}, "observation": {"output": "pending"}},
        ...     {"tool_call": {"name": "respond", "parameters": {"message": "It is pending."}}}]}))
        [0] get_order({"id": 7}) -> pending
        FINAL ANSWER: It is pending.
    """
    record = trajectory.model_dump(mode="json") if hasattr(trajectory, "model_dump") else trajectory
    steps = record.get("steps") or []
    last = steps[-1]["tool_call"] if steps else {}
    answer = None
    if last.get("name") in CLOSING_TOOLS:
        params = last.get("parameters") or {}
        answer = params.get(CLOSING_TOOLS[last["name"]], next(iter(params.values()), ""))
        steps = steps[:-1]
    shown = list(range(len(steps)))
    if len(shown) > steps_shown:
        shown = shown[: steps_shown // 2] + shown[len(shown) - steps_shown // 2 :]
    lines = []
    for previous, j in zip([-1, *shown], shown):
        if j > previous + 1:
            lines.append(f"... ({j - previous - 1} steps not shown) ...")
        call = steps[j]["tool_call"]
        params = clip_middle(json.dumps(call.get("parameters") or {}, ensure_ascii=False), 300)
        output = clip_middle((steps[j].get("observation") or {}).get("output"), observation_chars)
        lines.append(f"[{j}] {call['name']}({params}) -> {output}")
    ending = "(none: the episode ended without one)" if answer is None else clip_middle(answer, 600)
    return "\n".join([*lines, f"FINAL ANSWER: {ending}"])


@dataclass
class RelativeJudge:
    """Scores a group of trajectories against each other (``score_group``) or one against a rubric
    (``score_rubric``) through ``judge``, whose ``failures`` and ``calls`` count the calls."""

    judge: Judge
    orders: int = 1  # 2: ask again with the order reversed and average (position bias)
    seed: int = 0
    observation_chars: int = 300
    steps_shown: int = 20

    def __post_init__(self) -> None:
        if self.orders not in (1, 2):
            raise ValueError(f"orders must be 1 or 2, got {self.orders!r}")
        if self.judge.verdict != "text":
            raise ValueError("a relative judge reads scores from the reply's text: use Judge(verdict='text')")
        if self.observation_chars < 20 or self.steps_shown < 2:
            raise ValueError(
                f"observation_chars must be >= 20 and steps_shown >= 2, got {self.observation_chars} and "
                f"{self.steps_shown}"
            )

    def _head(self, task_description: str, rubric: str) -> list[str]:
        return [f"TASK: {clip_middle(task_description, 1500)}", "", f"RUBRIC: {clip_middle(rubric, 1500)}", ""]

    def shown_order(self, texts: list[str], task_description: str, rubric: str) -> list[int]:
        """The trajectory shown at each position: a permutation seeded by ``seed`` and the group."""
        content = json.dumps([task_description, rubric, texts], ensure_ascii=False)
        order = list(range(len(texts)))
        random.Random(f"{self.seed}:{hashlib.sha256(content.encode()).hexdigest()}").shuffle(order)
        return order

    def group_prompt(self, task_description: str, rubric: str, texts: list[str]) -> str:
        """The user message for transcripts ``texts``, shown in the order given."""
        lines = self._head(task_description, rubric)
        for number, text in enumerate(texts, start=1):
            lines += [f"TRAJECTORY {number}:", text, ""]
        slots = ", ".join(f"<trajectory {number}>" for number in range(1, len(texts) + 1))
        lines.append(f'Score the {len(texts)} trajectories: {{"scores": [{slots}]}}')
        return "\n".join(lines)

    def score_group(self, task_description: str, rubric: str, trajectories: list[Any]) -> list[float | None]:
        """One score in [0, 1] per trajectory, in the order given; ``None`` for every one when the
        judge abstains (the reason in ``judge.failures``)."""
        n = len(trajectories)
        if n == 0:
            return []
        texts = [transcript(t, self.observation_chars, self.steps_shown) for t in trajectories]
        first = self.shown_order(texts, task_description, rubric)
        sums, answered = [0.0] * n, 0
        for order in [first, first[::-1]][: self.orders if n > 1 else 1]:
            prompt = self.group_prompt(task_description, rubric, [texts[i] for i in order])
            scores = self.judge.ask(
                prompt,
                GROUP_SYSTEM_PROMPT,
                lambda text: parse_group_scores(text, n),
                f"group of {n} ({clip_middle(task_description, 60)})",
            )
            if scores is None:
                continue
            answered += 1
            for position, i in enumerate(order):
                sums[i] += scores[position]
        return [total / answered for total in sums] if answered else [None] * n

    def score_rubric(self, task_description: str, rubric: str, trajectory: Any) -> float | None:
        """How well one trajectory meets ``rubric``, in [0, 1]; ``None`` when the judge abstains."""
        text = transcript(trajectory, self.observation_chars, self.steps_shown)
        prompt = "\n".join(
            [*self._head(task_description, rubric), "TRAJECTORY:", text, "", 'Score it: {"score": <0 to 1>}']
        )
        return self.judge.ask(
            prompt, RUBRIC_SYSTEM_PROMPT, parse_rubric_score, f"rubric ({clip_middle(task_description, 60)})"
        )


__all__ = [
    "GROUP_SYSTEM_PROMPT",
    "RUBRIC_SYSTEM_PROMPT",
    "RelativeJudge",
    "parse_group_scores",
    "parse_rubric_score",
    "transcript",
]
