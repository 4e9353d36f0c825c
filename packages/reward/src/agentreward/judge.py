"""Layer 2: an LLM judge scores the model rubrics of each step.

The judge talks to any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang, the
``knowlyr-trainer serve`` server) or Anthropic's Messages API, through the official SDKs
(extra ``llm``). For each step it sends the task, a compact history and the step, and asks
for a JSON object with ``goal_progress``, ``tool_selection`` and ``param_correctness`` in
[0, 1]. Replies are parsed leniently (the first JSON object in the text, else ``name: value``
pairs in prose, which small models often write instead; 0-10 scales are rescaled). The first
request is greedy; a retry after an unusable reply samples (``retry_temperature``), since a
greedy model would only repeat itself. When a reply stays unusable after ``max_retries`` the judge abstains for that step
(``None``) and records why in ``failures``: the engine then keeps the rule layer's scores, so
a flaky endpoint degrades the reward instead of corrupting it.

The prompt carries the domain's policy when the trajectory has one (``metadata.system_prompt``,
as recorded tau-bench and suite runs do), and the system prompt holds two worked examples. Modes:
``step`` (one call per step, the model rubrics), ``trajectory`` (one call per trajectory: the
probability that the task was accomplished, blended into the total by the engine) or ``both``.

Verdicts: ``text`` (the JSON replies above) or ``logprobs``, for endpoints that return
``top_logprobs`` (OpenAI, vLLM, ``knowlyr-trainer serve``): the judge asks a Yes/No question
and reads P(Yes) / (P(Yes) + P(No)) off the first token's distribution, one generated token per
call. A small model that will not write a number still has a graded belief, and the call costs
one prompt pass. In step mode that probability is every model rubric's score.

The endpoint is remote and its replies are untrusted input. Each reply body is streamed and
capped (``_MAX_REPLY_BYTES``), its JSON nesting depth is checked before it is parsed, parser
errors (ints over Python's 4300 digits, recursion) are caught, and its shape is checked (a
non-empty ``choices`` list of objects, string content, finite logprobs in
[``-_LOGPROB_FLOOR``, 0]) before any field is used. A call has a wall-clock deadline
(``call_deadline``) over all of it, headers included, since the SDK's ``timeout`` bounds each
read only and a judge that drips a byte at a time would otherwise hold a call for ever; an
optional ``run_deadline`` makes every call after it abstain. Each of these failures is a
``JudgeError``: the judge abstains and counts it in ``failures``, as for any unusable reply.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agentreward.errors import JudgeError, JudgeSetupError
from agentreward.rubrics import MODEL_RUBRICS, RUBRICS
from knowlyrcore.errors import require_extra

_JSON_OBJECT = re.compile(r"\{[^{}]*\}", re.DOTALL)
# "goal_progress: 0.7", "tool_selection = 1", "param_correctness is 0.5" (quotes allowed around the name)
_NAMED_NUMBER = r"\b{name}\b[\"']?\s*(?::|=|\bis\b)\s*(-?\d+(?:\.\d+)?)"
_HISTORY_STEPS = 6
_CLIP = 600

_POLICY_CLIP = 2500
_TRANSCRIPT_STEPS = 40
MODES = ("step", "trajectory", "both")

# Limits on what a (possibly hostile) endpoint may send. A reply of max_tokens tokens with 20
# top_logprobs is a few kB; the nesting of a chat completion is under 10 levels.
_MAX_REPLY_BYTES = 1 << 20
_MAX_JSON_DEPTH = 32
_LOGPROB_FLOOR = 1e4  # exp(-1e4) is already 0.0: any lower logprob says nothing more
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")

SYSTEM_PROMPT = (
    "You are a strict reviewer of an AI agent's tool calls. For the CURRENT STEP, rate each "
    "criterion from 0 (bad) to 1 (excellent), judging it against the POLICY when one is given. "
    "Answer with one JSON object and nothing else, e.g. "
    '{"goal_progress": 0.7, "tool_selection": 1.0, "param_correctness": 0.5}.\n\n'
    "Example 1. TASK: fix the failing test in sort.py. HISTORY: [0] read_file(sort.py) -> the code. "
    "CURRENT STEP: read_file(sort.py) -> the same code. Answer: "
    '{"goal_progress": 0.1, "tool_selection": 0.5, "param_correctness": 1.0}\n'
    "Example 2. TASK: cancel order #W12. POLICY: get the user's explicit yes before cancelling. "
    "HISTORY: [0] respond(Cancel #W12?) -> user: yes. CURRENT STEP: cancel_order(#W12) -> cancelled. "
    'Answer: {"goal_progress": 1.0, "tool_selection": 1.0, "param_correctness": 1.0}'
)

TRAJECTORY_SYSTEM_PROMPT = (
    "You are a strict reviewer of an AI agent's work. Read the POLICY (when given), the TASK and the "
    "TRANSCRIPT, then estimate the probability that the agent accomplished the task correctly and "
    "within the policy: right actions with the right arguments, nothing the user did not ask for or "
    'confirm. Answer with one JSON object and nothing else, e.g. {"task_success": 0.3}.'
)


VERDICTS = ("text", "logprobs")
_TOP_LOGPROBS = 20  # the most OpenAI's API returns
VERDICT_SYSTEM_PROMPT = (
    "You are a strict reviewer of an AI agent's tool calls. Judge the CURRENT STEP against the TASK, the "
    "CRITERIA and the POLICY when one is given. Answer with one word: Yes or No."
)
VERDICT_QUESTION = "Is the CURRENT STEP a correct and useful step toward the task? Answer Yes or No."
TRAJECTORY_VERDICT_SYSTEM_PROMPT = (
    "You are a strict reviewer of an AI agent's work. Read the POLICY (when given), the TASK and the "
    "TRANSCRIPT, then say whether the agent accomplished the task correctly and within the policy: right "
    "actions with the right arguments, nothing the user did not ask for or confirm. Answer with one word: "
    "Yes or No."
)


def clip_middle(text: Any, limit: int = _CLIP) -> str:
    """``text`` (``str()`` of it; "" for None) in at most ``limit`` characters: its two ends around " … "."""
    text = str(text or "")
    return text if len(text) <= limit else text[: limit // 2] + " … " + text[-limit // 2 :]


def _policy_lines(trajectory: dict[str, Any]) -> list[str]:
    policy = (trajectory.get("metadata") or {}).get("system_prompt")
    if not isinstance(policy, str) or not policy.strip():
        return []
    text = policy if len(policy) <= _POLICY_CLIP else policy[:_POLICY_CLIP] + " …"
    return [f"POLICY: {text}", ""]


def build_prompt(trajectory: dict[str, Any], index: int) -> str:
    """The user message for step ``index``: policy, task, recent history, the step, the criteria."""
    task = trajectory.get("task") or {}
    steps = trajectory["steps"]
    lines = [*_policy_lines(trajectory), f"TASK: {clip_middle(task.get('description'), 1500)}", "", "HISTORY:"]
    for j in range(max(0, index - _HISTORY_STEPS), index):
        s = steps[j]
        lines.append(
            f"[{j}] {s['tool_call']['name']}({clip_middle(json.dumps(s['tool_call'].get('parameters', {})), 200)})"
            f" -> {clip_middle((s.get('observation') or {}).get('output'), 200)}"
        )
    if index == 0:
        lines.append("(none)")
    step = steps[index]
    lines += [
        "",
        "CURRENT STEP:",
        f"thought: {clip_middle(step.get('thought'))}",
        f"tool: {step['tool_call']['name']}",
        f"parameters: {clip_middle(json.dumps(step['tool_call'].get('parameters', {}), ensure_ascii=False))}",
        f"observation: {clip_middle((step.get('observation') or {}).get('output'))}",
        "",
        "CRITERIA:",
        *[f"- {name}: {RUBRICS[name].description}" for name in MODEL_RUBRICS],
    ]
    return "\n".join(lines)


def build_trajectory_prompt(trajectory: dict[str, Any]) -> str:
    """The user message of the trajectory mode: policy, task and a compact transcript (the first
    and last steps when there are more than ``_TRANSCRIPT_STEPS``)."""
    task = trajectory.get("task") or {}
    steps = trajectory["steps"]
    shown = list(range(len(steps)))
    if len(shown) > _TRANSCRIPT_STEPS:
        half = _TRANSCRIPT_STEPS // 2
        shown = shown[:half] + shown[-half:]
    lines = [*_policy_lines(trajectory), f"TASK: {clip_middle(task.get('description'), 1500)}", "", "TRANSCRIPT:"]
    for j in shown:
        call = steps[j]["tool_call"]
        params = clip_middle(json.dumps(call.get("parameters", {}), ensure_ascii=False), 300)
        lines.append(
            f"[{j}] {call['name']}({params}) -> {clip_middle((steps[j].get('observation') or {}).get('output'), 300)}"
        )
    lines += ["", "Did the agent accomplish the task correctly and within the policy?"]
    return "\n".join(lines)


def _json_depth_ok(text: str, limit: int = _MAX_JSON_DEPTH) -> bool:
    """Whether no JSON array/object in ``text`` nests deeper than ``limit``: checked before
    ``json.loads``, whose C scanner recurses once per level (a RecursionError, or worse)."""
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):  # brackets inside strings do not nest
        depth += 1 if bracket.group() in "[{" else -1
        if depth > limit:
            return False
    return True


def load_untrusted_json(text: str) -> Any:
    """``json.loads`` for untrusted text: ``JudgeError`` for anything it cannot or should not read."""
    if not _json_depth_ok(text):
        raise JudgeError(f"JSON nested deeper than {_MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, and ints over 4300 digits
        raise JudgeError(f"unreadable JSON: {clip_middle(exc, 160)}") from None


def _unit(value: Any) -> float | None:
    """``value`` as a score in [0, 1] (a 0-10 scale rescaled), or ``None``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except OverflowError:  # an int of hundreds of digits
        return None
    if 1 < value <= 10:
        value /= 10  # a 0-10 scale
    return value if 0 <= value <= 1 else None


def _named_scores(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """The scores of ``names`` in the first JSON object that has any, else in ``name: value`` prose."""
    for match in _JSON_OBJECT.finditer(text):
        try:
            data = load_untrusted_json(match.group(0))
        except JudgeError:
            continue
        if isinstance(data, dict):
            scores = {name: v for name in names if (v := _unit(data.get(name))) is not None}
            if scores:
                return scores
    scores = {}
    for name in names:
        found = re.search(_NAMED_NUMBER.format(name=re.escape(name)), text)
        if found and (value := _unit(float(found.group(1)))) is not None:
            scores[name] = value
    return scores


def parse_verdict(top: list[tuple[str, float]]) -> float:
    """P(Yes) / (P(Yes) + P(No)) over a first token's likeliest ``(token, logprob)`` pairs (any
    case, spacing or trailing punctuation); ``JudgeError`` when neither word is among them."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in top:
        _check_logprob(logprob)  # math.exp(1000) overflows, math.exp("high") is a TypeError
        word = token.strip().strip(".,!:;\"'").lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    if mass["yes"] + mass["no"] <= 0:
        shown = [token for token, _ in top[:8]]
        raise JudgeError(f"neither Yes nor No among the reply's {len(top)} likeliest first tokens: {shown!r}")
    return mass["yes"] / (mass["yes"] + mass["no"])


def _check_logprob(value: Any) -> float:
    """``value`` if it is a finite log-probability in [-_LOGPROB_FLOOR, 0], else ``JudgeError``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not -_LOGPROB_FLOOR <= value <= 0  # also refuses NaN
    ):
        raise JudgeError(f"a logprob must be a number in [-{_LOGPROB_FLOOR:g}, 0], got {clip_middle(repr(value), 40)}")
    return float(value)


def _first_choice(reply: dict[str, Any]) -> dict[str, Any]:
    """The first choice of an OpenAI chat completion, after checking ``choices`` is a non-empty
    list of objects."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        raise JudgeError(
            f"reply has no usable choices (a non-empty list of objects): {clip_middle(repr(choices), 120)}"
        )
    return choices[0]


def parse_success(text: str) -> float:
    """The ``task_success`` probability of a trajectory-mode reply; ``JudgeError`` if absent."""
    scores = _named_scores(text or "", ("task_success",))
    if not scores:
        raise JudgeError(
            f"no JSON object (or `name: value` text) with task_success in [0, 1] in reply: {clip_middle(text, 160)!r}"
        )
    return scores["task_success"]


def parse_scores(text: str) -> dict[str, float]:
    """Extract the model rubrics from a reply; raise ``JudgeError`` saying what was wrong."""
    scores = _named_scores(text or "", MODEL_RUBRICS)
    if not scores:
        raise JudgeError(
            f"no JSON object (or `name: value` text) with {', '.join(MODEL_RUBRICS)} in reply: {clip_middle(text, 160)!r}"
        )
    return scores


@dataclass
class Judge:
    """An LLM judge on an OpenAI-compatible (``provider="openai"``) or Anthropic endpoint."""

    model: str
    base_url: str | None = None
    api_key: str | None = None
    provider: str = "openai"
    max_retries: int = 2
    retry_temperature: float = 0.7
    timeout: float = 60.0  # per read, the SDK's
    call_deadline: float = 120.0  # seconds for a whole call, headers and body
    run_deadline: float | None = None  # seconds from the first call, after which every call abstains
    max_tokens: int = 96
    mode: str = "step"
    verdict: str = "text"
    failures: list[str] = field(default_factory=list)
    calls: int = 0
    _cache: dict[str, dict[str, float] | None] = field(default_factory=dict, repr=False)
    _client: Any = field(default=None, repr=False)
    _run_started: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.provider not in ("openai", "anthropic"):
            raise ValueError(f"provider must be 'openai' or 'anthropic', got {self.provider!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")
        if self.verdict == "logprobs" and self.provider != "openai":
            raise ValueError("verdict='logprobs' needs an OpenAI-compatible endpoint: Anthropic's API has no logprobs")
        if self.max_retries < 0 or self.max_tokens < 1 or not 0 <= self.retry_temperature <= 2:
            raise ValueError(
                "max_retries must be >= 0, max_tokens >= 1 and retry_temperature in [0, 2], got "
                f"{self.max_retries}, {self.max_tokens} and {self.retry_temperature}"
            )
        deadlines = (self.call_deadline, self.run_deadline if self.run_deadline is not None else 0.0)
        if not all(isinstance(d, (int, float)) and math.isfinite(d) for d in deadlines) or not (
            self.call_deadline > 0 and deadlines[1] >= 0
        ):
            raise ValueError(
                "call_deadline must be a finite number of seconds > 0 and run_deadline None or >= 0, got "
                f"{self.call_deadline!r} and {self.run_deadline!r}"
            )

    def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        # a missing SDK is no flaky endpoint: MissingExtraError is not a JudgeError, so the judge
        # does not abstain on it (leaving the rule scores in place) but stops the scoring
        if self.provider == "openai":
            OpenAI = require_extra("openai", "knowlyr-reward", "llm", "the openai judge").OpenAI
            self._client = OpenAI(
                base_url=self.base_url, api_key=self.api_key or "not-needed", timeout=self.timeout, max_retries=0
            )
        else:
            Anthropic = require_extra("anthropic", "knowlyr-reward", "llm", "the anthropic judge").Anthropic
            self._client = Anthropic(
                base_url=self.base_url, api_key=self.api_key or "not-needed", timeout=self.timeout, max_retries=0
            )
        return self._client

    def connect(self) -> None:
        """Build the SDK client now, so a missing SDK stops a run before its first episode rather
        than at its first judge call."""
        self._get_client()

    def _deadline(self) -> float:
        """The monotonic time by which this call must be done: its own deadline, or the run's if
        sooner; ``JudgeError`` once the run's has passed."""
        now = time.monotonic()
        if self._run_started is None:
            self._run_started = now
        deadline = now + self.call_deadline
        if self.run_deadline is not None:
            if now >= self._run_started + self.run_deadline:
                raise JudgeError(f"the judge's run deadline ({self.run_deadline:g} s) has passed: not asked")
            deadline = min(deadline, self._run_started + self.run_deadline)
        return deadline

    def _request(self, prompt: str, system: str, **options: Any) -> dict[str, Any]:
        """One chat request with ``options`` (temperature, max_tokens, ...): the reply's JSON object,
        read within the deadline and the size cap and parsed with the depth check; every failure a
        ``JudgeError``.

        The request runs in a daemon thread the caller waits on until the deadline: that is the
        only bound on the parts the SDK reads itself (headers, the body of an error status), which
        a dripping server can stretch for ever under a per-read timeout. A thread left behind
        stops at its next chunk, or at the per-read timeout when the server goes quiet."""
        client = self._get_client()
        deadline = self._deadline()
        self.calls += 1
        outcome: dict[str, Any] = {}
        stop = threading.Event()

        def call() -> None:
            try:
                outcome["body"] = self._read_reply(client, prompt, system, options, deadline, stop)
            except BaseException as exc:  # handed to the caller, who decides what it means
                outcome["error"] = exc

        worker = threading.Thread(target=call, name="knowlyr-judge-call", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            stop.set()
            raise JudgeError(self._where(f"no complete reply within the call deadline ({self.call_deadline:g} s)"))
        error = outcome.get("error")
        if isinstance(error, JudgeError):
            raise error
        if error is not None:  # the SDKs raise many transport classes; keep the message
            raise JudgeError(self._where(f"{type(error).__name__}: {error}")) from error
        try:
            text = outcome["body"].decode("utf-8")
        except UnicodeDecodeError:
            raise JudgeError(self._where("the reply is not UTF-8")) from None
        reply = load_untrusted_json(text)
        if not isinstance(reply, dict):
            raise JudgeError(self._where(f"the reply is not a JSON object: {clip_middle(text, 120)!r}"))
        return reply

    def _where(self, problem: str) -> str:
        return f"{self.provider} endpoint {self.base_url or '(default)'}: {problem}"

    def _read_reply(
        self, client: Any, prompt: str, system: str, options: dict[str, Any], deadline: float, stop: threading.Event
    ) -> bytes:
        """The raw reply body, streamed so the size cap and the deadline are checked between
        chunks (the SDK's own parsing would read any size and parse any depth)."""
        # no single read may outlast the deadline either
        timeout = max(0.001, min(self.timeout, deadline - time.monotonic()))
        if self.provider == "openai":
            messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
            create = client.chat.completions.with_streaming_response.create
            stream = create(model=self.model, messages=messages, timeout=timeout, **options)
        else:
            messages = [{"role": "user", "content": prompt}]
            create = client.messages.with_streaming_response.create
            # Sampling options go in the body as the API reads them: recent anthropic SDKs no longer
            # take ``temperature`` as a keyword (a TypeError on every call, so every verdict abstained).
            sampling = {k: v for k, v in options.items() if k != "max_tokens"}
            stream = create(
                model=self.model,
                system=system,
                messages=messages,
                max_tokens=options["max_tokens"],
                timeout=timeout,
                extra_body=sampling or None,
            )
        body = bytearray()
        with stream as response:
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > _MAX_REPLY_BYTES:
                    raise JudgeError(self._where(f"the reply is over {_MAX_REPLY_BYTES} bytes: not read further"))
                if stop.is_set() or time.monotonic() > deadline:
                    raise JudgeError(
                        self._where(f"no complete reply within the call deadline ({self.call_deadline:g} s)")
                    )
        return bytes(body)

    def complete(self, prompt: str, system: str = SYSTEM_PROMPT, temperature: float = 0.0) -> str:
        """One chat completion's text; transport errors and malformed replies become ``JudgeError``."""
        reply = self._request(prompt, system, temperature=temperature, max_tokens=self.max_tokens)
        if self.provider == "openai":
            message = _first_choice(reply).get("message")
            if not isinstance(message, dict):
                raise JudgeError(f"reply's first choice has no message object: {clip_middle(repr(message), 120)}")
            content = message.get("content")
            if content is not None and not isinstance(content, str):  # None: an empty reply, unusable later
                raise JudgeError(f"reply's message content is not a string: {clip_middle(repr(content), 120)}")
            return content or ""
        blocks = reply.get("content")
        if not isinstance(blocks, list) or not all(isinstance(block, dict) for block in blocks):
            raise JudgeError(f"reply's content is not a list of blocks: {clip_middle(repr(blocks), 120)}")
        texts = [block.get("text", "") for block in blocks]
        if not all(isinstance(text, str) for text in texts):
            raise JudgeError(f"reply has a content block whose text is not a string: {clip_middle(repr(texts), 120)}")
        return "".join(texts)

    def first_token_logprobs(self, prompt: str, system: str) -> list[tuple[str, float]]:
        """The likeliest first tokens of the reply, as ``(token, logprob)``; transport errors and
        malformed replies become ``JudgeError``, an endpoint that returns no logprobs a
        ``JudgeSetupError``."""
        reply = self._request(prompt, system, temperature=0, max_tokens=1, logprobs=True, top_logprobs=_TOP_LOGPROBS)
        logprobs = _first_choice(reply).get("logprobs")
        if logprobs is None or (isinstance(logprobs, dict) and not logprobs.get("content")):
            raise JudgeSetupError(
                f"the judge endpoint {self.base_url or '(default)'} returned no logprobs for model {self.model!r}: "
                "it does not support logprobs/top_logprobs; use the text verdict (--judge-verdict text)"
            )
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if not isinstance(content, list) or not isinstance(content[0], dict):
            raise JudgeError(f"reply's logprobs are malformed: {clip_middle(repr(logprobs), 120)}")
        alternatives = content[0].get("top_logprobs") or []
        if not isinstance(alternatives, list):
            raise JudgeError(f"reply's top_logprobs are not a list: {clip_middle(repr(alternatives), 120)}")
        entries = [content[0], *alternatives]
        unique: dict[str, float] = {}
        for entry in entries:  # the chosen token is usually among the top ones too
            if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
                raise JudgeError(f"reply's logprobs are malformed: {clip_middle(repr(entry), 120)}")
            unique.setdefault(entry["token"], _check_logprob(entry.get("logprob")))
        return list(unique.items())

    def ask(self, prompt: str, system: str, parse: Any, what: str) -> Any:
        """``parse(reply)`` of a reply to ``prompt`` (its text, or its first-token logprobs with the
        logprobs verdict), or ``None`` (abstain, the reason in ``failures`` under ``what``) after
        ``max_retries`` unusable replies; ``parse`` raises ``JudgeError`` for an unusable one."""
        key = hashlib.sha256((self.verdict + "\x00" + system + "\x00" + prompt).encode()).hexdigest()
        if key in self._cache:
            return self._cache[key]
        result = None
        last_error = ""
        temperature = 0.0
        for _ in range(self.max_retries + 1):
            try:
                if self.verdict == "logprobs":
                    reply: Any = self.first_token_logprobs(prompt, system)
                else:
                    reply = self.complete(prompt, system, temperature)
            except JudgeError as exc:  # transport: the same request again
                last_error = str(exc)
                continue
            try:
                result = parse(reply)
                break
            except JudgeError as exc:  # unusable: greedy decoding would repeat it, so sample
                last_error = str(exc)
                if self.verdict == "logprobs":
                    break  # the same prompt has the same first-token distribution
                temperature = self.retry_temperature
        if result is None:
            self.failures.append(f"{what}: {last_error}")
        self._cache[key] = result
        return result

    def score_step(self, trajectory: dict[str, Any], index: int) -> dict[str, float] | None:
        """Scores for one step, or ``None`` (abstain) after ``max_retries`` unusable replies."""
        if self.verdict == "logprobs":
            prompt = build_prompt(trajectory, index) + "\n\n" + VERDICT_QUESTION
            return self.ask(prompt, VERDICT_SYSTEM_PROMPT, _rubrics_from_verdict, f"step {index}")
        return self.ask(build_prompt(trajectory, index), SYSTEM_PROMPT, parse_scores, f"step {index}")

    def score_steps(self, trajectory: dict[str, Any]) -> list[dict[str, float] | None]:
        """Per-step scores (``None`` where the judge abstains, or for every step in trajectory mode)."""
        if self.mode == "trajectory":
            return [None] * len(trajectory["steps"])
        return [self.score_step(trajectory, i) for i in range(len(trajectory["steps"]))]

    def score_trajectory(self, trajectory: dict[str, Any]) -> float | None:
        """The probability that the trajectory accomplished its task, or ``None`` (step mode, or
        the judge abstains)."""
        if self.mode == "step":
            return None
        if self.verdict == "logprobs":
            return self.ask(
                build_trajectory_prompt(trajectory), TRAJECTORY_VERDICT_SYSTEM_PROMPT, parse_verdict, "trajectory"
            )
        return self.ask(build_trajectory_prompt(trajectory), TRAJECTORY_SYSTEM_PROMPT, parse_success, "trajectory")


def _rubrics_from_verdict(top: list[tuple[str, float]]) -> dict[str, float]:
    """One step's P(Yes) as the score of every model rubric."""
    return dict.fromkeys(MODEL_RUBRICS, parse_verdict(top))
