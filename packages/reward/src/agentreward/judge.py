"""Layer 2: an LLM judge scores the model rubrics of each step.

The judge talks to any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, the
``knowlyr-trainer serve`` server) or Anthropic's Messages API, through the official SDKs
(extra ``llm``). For each step it sends the task, a compact history and the step, and asks
for a JSON object with ``goal_progress``, ``tool_selection`` and ``param_correctness`` in
[0, 1]. Replies are parsed leniently (the first JSON object in the text; 0-10 scales are
rescaled). When a reply stays unusable after ``max_retries`` the judge abstains for that step
(``None``) and records why in ``failures``: the engine then keeps the rule layer's scores, so
a flaky endpoint degrades the reward instead of corrupting it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentreward.errors import JudgeError
from agentreward.rubrics import MODEL_RUBRICS, RUBRICS

_JSON_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)
_HISTORY_STEPS = 6
_CLIP = 600

SYSTEM_PROMPT = (
    "You are a strict reviewer of an AI agent's tool calls. For the CURRENT STEP, rate each "
    "criterion from 0 (bad) to 1 (excellent). Answer with one JSON object and nothing else, e.g. "
    '{"goal_progress": 0.7, "tool_selection": 1.0, "param_correctness": 0.5}.'
)


def _clip(text: Any, limit: int = _CLIP) -> str:
    text = str(text or "")
    return text if len(text) <= limit else text[: limit // 2] + " … " + text[-limit // 2 :]


def build_prompt(trajectory: dict[str, Any], index: int) -> str:
    """The user message for step ``index``: task, recent history, the step, the criteria."""
    task = trajectory.get("task") or {}
    steps = trajectory["steps"]
    lines = [f"TASK: {_clip(task.get('description'), 1500)}", "", "HISTORY:"]
    for j in range(max(0, index - _HISTORY_STEPS), index):
        s = steps[j]
        lines.append(f"[{j}] {s['tool_call']['name']}({_clip(json.dumps(s['tool_call'].get('parameters', {})), 200)})"
                     f" -> {_clip((s.get('observation') or {}).get('output'), 200)}")  # fmt: skip
    if index == 0:
        lines.append("(none)")
    step = steps[index]
    lines += [
        "",
        "CURRENT STEP:",
        f"thought: {_clip(step.get('thought'))}",
        f"tool: {step['tool_call']['name']}",
        f"parameters: {_clip(json.dumps(step['tool_call'].get('parameters', {}), ensure_ascii=False))}",
        f"observation: {_clip((step.get('observation') or {}).get('output'))}",
        "",
        "CRITERIA:",
        *[f"- {name}: {RUBRICS[name].description}" for name in MODEL_RUBRICS],
    ]
    return "\n".join(lines)


def parse_scores(text: str) -> dict[str, float]:
    """Extract the model rubrics from a reply; raise ``JudgeError`` saying what was wrong."""
    for match in _JSON_OBJECT.finditer(text or ""):
        try:
            data = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict):
            continue
        scores: dict[str, float] = {}
        for name in MODEL_RUBRICS:
            value = data.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = float(value)
                if 1 < value <= 10:
                    value /= 10  # a 0-10 scale
                if 0 <= value <= 1:
                    scores[name] = value
        if scores:
            return scores
    raise JudgeError(f"no JSON object with {', '.join(MODEL_RUBRICS)} in reply: {_clip(text, 160)!r}")


@dataclass
class Judge:
    """An LLM judge on an OpenAI-compatible (``provider="openai"``) or Anthropic endpoint."""

    model: str
    base_url: str | None = None
    api_key: str | None = None
    provider: str = "openai"
    max_retries: int = 2
    timeout: float = 60.0
    max_tokens: int = 96
    failures: list[str] = field(default_factory=list)
    calls: int = 0
    _cache: dict[str, dict[str, float] | None] = field(default_factory=dict, repr=False)
    _client: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.provider not in ("openai", "anthropic"):
            raise ValueError(f"provider must be 'openai' or 'anthropic', got {self.provider!r}")

    def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            if self.provider == "openai":
                from openai import OpenAI

                self._client = OpenAI(base_url=self.base_url, api_key=self.api_key or "not-needed",
                                      timeout=self.timeout, max_retries=0)  # fmt: skip
            else:
                from anthropic import Anthropic

                self._client = Anthropic(base_url=self.base_url, api_key=self.api_key or "not-needed",
                                         timeout=self.timeout, max_retries=0)  # fmt: skip
        except ImportError as exc:
            raise JudgeError(f"the judge needs the {self.provider} SDK: pip install 'knowlyr-reward[llm]'") from exc
        return self._client

    def complete(self, prompt: str) -> str:
        """One chat completion; transport errors become ``JudgeError``."""
        client = self._get_client()
        self.calls += 1
        try:
            if self.provider == "openai":
                reply = client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
                    temperature=0,
                    max_tokens=self.max_tokens,
                )
                return reply.choices[0].message.content or ""
            reply = client.messages.create(
                model=self.model,
                system=SYSTEM_PROMPT,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=self.max_tokens,
                temperature=0,
            )
            return "".join(getattr(block, "text", "") for block in reply.content)
        except Exception as exc:  # the SDKs raise many transport classes; keep the message
            raise JudgeError(
                f"{self.provider} endpoint {self.base_url or '(default)'}: {type(exc).__name__}: {exc}"
            ) from exc

    def score_step(self, trajectory: dict[str, Any], index: int) -> dict[str, float] | None:
        """Scores for one step, or ``None`` (abstain) after ``max_retries`` unusable replies."""
        prompt = build_prompt(trajectory, index)
        key = hashlib.sha256(prompt.encode()).hexdigest()
        if key in self._cache:
            return self._cache[key]
        result: dict[str, float] | None = None
        last_error = ""
        for _ in range(self.max_retries + 1):
            try:
                result = parse_scores(self.complete(prompt))
                break
            except JudgeError as exc:
                last_error = str(exc)
        if result is None:
            self.failures.append(f"step {index}: {last_error}")
        self._cache[key] = result
        return result

    def score_steps(self, trajectory: dict[str, Any]) -> list[dict[str, float] | None]:
        return [self.score_step(trajectory, i) for i in range(len(trajectory["steps"]))]
