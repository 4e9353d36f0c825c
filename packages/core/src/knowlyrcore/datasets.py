"""The training dataset records, once: ``SFTRecord``, ``DPORecord``, ``GRPORecord``, and the one
rule that pairs attempts for DPO (``pair_preferences``).

knowlyr-hub's exporter writes these models and knowlyr-trainer's readers validate with them, so
the two agree on every field by construction (``docs/formats.md`` describes them field by field).
Read a file with the JSONL reader: ``read_jsonl(path, GRPORecord)`` yields models and refuses a
bad record as ``path:line: field: problem`` (``trajectories[1].reward: Field required``).

The on-disk format is the one these files always had. A record written from a model holds only
the fields that were given (or read), never a ``null`` for every shape it does not use; fields a
model does not declare are kept as they are (a chat message's ``name``, a record's ``id``).

Token ids survive export. When a trajectory's steps carry what the policy sampled
(``Step.token_ids`` / ``logprobs``), each assistant message (and agent ``steps`` entry) carries
them too; an online rollout also records the tokens between answers
(``metadata.observation_token_ids``, on the step's ``tool`` message here) and the prompt's
(``metadata.prompt_token_ids``, a GRPO trajectory's or a DPO pair's ``prompt_token_ids``). When
all of these are there, ``GRPOTrajectory.recorded_token_ids`` (``DPORecord.recorded_token_ids``
for each side of a pair) is the exact sequence the policy saw, which knowlyr-trainer trains on
instead of rendering the chat template again.

Examples:
    >>> record = GRPORecord.model_validate({"task_id": "t", "prompt": "say hi", "trajectories": [
    ...     {"messages": [{"role": "assistant", "content": "hi", "token_ids": [5, 6]}], "reward": 1.0,
    ...      "prompt_token_ids": [1, 2]}, {"response": "no", "reward": 0.0}]})
    >>> record.trajectories[0].recorded_token_ids(), record.trajectories[1].recorded_token_ids()
    ([[1, 2], [5, 6]], None)
    >>> record.model_dump()["trajectories"][1]  # only what was given: no nulls
    {'response': 'no', 'reward': 0.0}
    >>> pair = DPORecord(prompt="say hi", chosen="hi", prompt_token_ids=[1, 2],
    ...                  rejected=[{"role": "assistant", "content": "no", "token_ids": [7]}])
    >>> pair.recorded_token_ids("chosen"), pair.recorded_token_ids("rejected")  # text was not sampled
    (None, [[1, 2], [7]])
    >>> [(p.chosen, p.rejected, p.margin) for p in pair_preferences(
    ...     [("a", 0.9), ("b", 0.1), ("c", 0.5)], task_id=lambda x: "t", reward=lambda x: x[1])]
    [(('a', 0.9), ('b', 0.1), 0.8)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from itertools import combinations
from typing import Annotated, Any, Generic, Literal, NamedTuple, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from knowlyrcore.jsonl import SCHEMA_VERSION, schema_version_problem
from knowlyrcore.trajectory import Trajectory

T = TypeVar("T")


def _number(value: Any) -> Any:
    """A finite JSON number: no bool (``true`` is not 1), no string, no overflow, no NaN/Infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("number", "must be a number, got {kind}", {"kind": type(value).__name__})
    try:
        number = float(value)
    except OverflowError:  # an integer past float range
        raise PydanticCustomError("number_too_large", "number too large for a float") from None
    if not math.isfinite(number):
        raise PydanticCustomError("finite_number", "not a finite number ({number})", {"number": number})
    return number


#: a finite number (a reward, a margin, a log-prob)
Number = Annotated[float, BeforeValidator(_number)]
#: a token id: a whole number >= 0 (``true`` and ``2.0`` are refused)
TokenId = Annotated[int, Field(strict=True, ge=0)]


def _task_id(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


TaskId = Annotated[str | None, BeforeValidator(_task_id)]


def _field_error(loc: tuple[str | int, ...], kind: str, message: str, value: Any) -> ValidationError:
    """A validation error at ``loc`` inside the model being validated (pydantic prefixes the
    model's own location), for checks that span fields but belong to one of them."""
    error = PydanticCustomError(kind, message)
    return ValidationError.from_exception_data("record", [InitErrorDetails(type=error, loc=loc, input=value)])


class _Model(BaseModel):
    """Dataset models keep undeclared fields and dump only the fields that were set, so a file
    read and written again is the same file, and no shape gets a ``null`` for what it lacks."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("exclude_unset", True)
        return super().model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        kwargs.setdefault("exclude_unset", True)
        return super().model_dump_json(**kwargs)


class _Tokens(_Model):
    """What the policy sampled, when recorded: token ids and their log-probs at sampling time."""

    token_ids: list[TokenId] | None = None
    logprobs: list[Number] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> _Tokens:
        if self.token_ids is not None and self.logprobs is not None and len(self.token_ids) != len(self.logprobs):
            raise _field_error(
                ("logprobs",), "length", f"{len(self.logprobs)} log-probs for {len(self.token_ids)} token_ids", None
            )
        return self


def _one_of(value: Any, types: tuple[type, ...], what: str) -> Any:
    if value is not None and not isinstance(value, types):
        raise PydanticCustomError("type", "must be {what}, got {kind}", {"what": what, "kind": type(value).__name__})
    return value


#: a message's content: text, a list of content parts, or null (a turn that only calls tools)
Content = Annotated[
    str | list[Any] | None, BeforeValidator(lambda v: _one_of(v, (str, list), "text or a list of parts"))
]


class ChatMessage(_Tokens):
    """One OpenAI chat message; keys it does not declare (``name``, ``reasoning_content``) are kept.

    ``token_ids`` of an assistant message are the ids the policy sampled for it (end-of-turn
    included), ``logprobs`` their log-probs; a ``tool`` message's ``token_ids`` are the tokens that
    followed the answer up to the next one (the template's closing tokens, the observation, the
    next assistant header). ``reward`` is an assistant turn's process reward (SFT step weights).
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: Content = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reward: Number | None = None

    def chat(self) -> dict[str, Any]:
        """The message as a chat template takes it: without the training-only keys."""
        return self.model_dump(exclude={"reward", "token_ids", "logprobs"})


_MESSAGES = TypeAdapter(list[ChatMessage])


def _text_or_messages(value: Any) -> Any:
    """Text, or a non-empty list of messages validated as such (errors name ``[i].role``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if not value:
            raise PydanticCustomError("empty", "must not be empty")
        return _MESSAGES.validate_python(value)
    raise PydanticCustomError(
        "text_or_messages", "must be text or a list of messages, got {kind}", {"kind": type(value).__name__}
    )


#: a prompt or a completion: text, or a non-empty list of chat messages
TextOrMessages = Annotated[str | list[ChatMessage], BeforeValidator(_text_or_messages)]


def _needs_assistant(value: Any) -> Any:
    if isinstance(value, list) and not any(m.role == "assistant" for m in value):
        raise PydanticCustomError("no_assistant", "has no assistant message to train on")
    return value


def _non_empty(value: Any) -> Any:
    if isinstance(value, list) and not value:
        raise PydanticCustomError("empty", "must not be empty")
    return value


class _Record(_Model):
    """What every dataset record has: ``schema_version`` (always written) and ``task_id``."""

    schema_version: str = SCHEMA_VERSION
    task_id: TaskId = None

    @field_validator("schema_version")
    @classmethod
    def _version(cls, value: str) -> str:
        problem = schema_version_problem(value)
        if problem:
            raise PydanticCustomError("schema_version", problem)
        return value

    def model_post_init(self, context: Any) -> None:
        self.model_fields_set.add("schema_version")  # written even when it was not given


class SFTStep(_Tokens):
    """One step of an agent-format SFT record: ``thought`` and ``action`` are trained on."""

    thought: str | None = None
    action: Any = None  # a tool call {"name", "parameters"} or its text
    observation: Any = None  # text, or JSON the trainer renders as text
    reward: Number | None = None  # the step's process reward: its loss weight

    @model_validator(mode="after")
    def _has_content(self) -> SFTStep:
        if self.action is None and not self.thought:
            raise PydanticCustomError("empty_step", "needs 'thought' or 'action'")
        return self


class SFTMetadata(_Model):
    """Free metadata; ``loss`` (a difficulty proxy for coreset selection) and ``task_type`` are read."""

    loss: Number | None = None
    task_type: str | None = None


class SFTRecord(_Record):
    """One SFT example, in one of three shapes (the trainer takes the first present):

    ``messages`` (+ ``tools``): an OpenAI chat, assistant turns trained on; ``steps``: the agent
    format, ``instruction`` (+ ``input``) then ``{thought, action, observation, reward}`` steps;
    ``response``: ``instruction`` (+ ``input``) and one answer, parsed into steps when written as
    ``Step N: / Thought: / Action: / Observation:`` blocks.
    """

    reward: Number | None = None
    task_type: str | None = None
    instruction: str | None = None
    input: str | None = None
    response: str | None = None
    steps: list[SFTStep] | None = None
    messages: list[ChatMessage] | None = None
    tools: list[dict[str, Any]] | None = None
    metadata: SFTMetadata | None = None

    @field_validator("messages")
    @classmethod
    def _chat(cls, value: list[ChatMessage] | None) -> list[ChatMessage] | None:
        return _needs_assistant(_non_empty(value))

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[SFTStep] | None) -> list[SFTStep] | None:
        if value is None:
            return value
        if not value:
            raise PydanticCustomError("empty", "must not be empty")
        if len({s.reward is None for s in value}) > 1:  # a step without one would get an arbitrary weight
            raise PydanticCustomError("partial_rewards", "either every step has a 'reward' or none does")
        return value

    @model_validator(mode="after")
    def _shape(self) -> SFTRecord:
        if self.messages is None and self.steps is None and self.response is None:
            raise PydanticCustomError("shape", "an SFT record needs 'messages', 'steps' or 'response'")
        if self.messages is None and self.instruction is None:
            raise _field_error(("instruction",), "missing", "Field required (a 'steps' or 'response' record)", None)
        return self

    @property
    def shape(self) -> Literal["messages", "steps", "response"]:
        """Which shape the trainer reads: ``messages``, else ``steps``, else ``response``."""
        return "messages" if self.messages is not None else "steps" if self.steps is not None else "response"


def _recorded(prompt_token_ids: list[int] | None, messages: Any) -> list[list[int]] | None:
    """``[prompt ids, ids of message 0, ids of message 1, ...]`` when the prompt's ids and every
    message's were recorded (``messages`` a list of them, not text), else None."""
    if prompt_token_ids is None or not isinstance(messages, list):
        return None
    if any(m.token_ids is None for m in messages):
        return None
    return [prompt_token_ids, *(m.token_ids for m in messages)]


class DPORecord(_Record):
    """One preference pair: ``chosen`` and ``rejected`` completions of the same ``prompt``, and
    ``prompt_token_ids`` when the prompt's ids were recorded (a side whose messages all carry
    ``token_ids`` is then trained on as sampled: ``recorded_token_ids``)."""

    prompt: TextOrMessages
    chosen: TextOrMessages
    rejected: TextOrMessages
    margin: Number | None = None  # the pair's reward difference
    metadata: dict[str, Any] = Field(default_factory=dict)  # the hub writes chosen_id, rejected_id
    prompt_token_ids: list[TokenId] | None = None  # the prompt's ids, first assistant header included

    _completions = field_validator("chosen", "rejected")(_needs_assistant)

    def recorded_token_ids(self, side: Literal["chosen", "rejected"]) -> list[list[int]] | None:
        """``[prompt ids, ids of message 0, ...]`` of one side when its whole sequence was recorded
        (``prompt_token_ids`` and the ``token_ids`` of every message of that side), else None: that
        side is rendered with the chat template."""
        return _recorded(self.prompt_token_ids, getattr(self, side))


class GRPOTrajectory(_Model):
    """One attempt of a GRPO group: its completion (``messages`` or ``response``), ``reward`` and
    per-step ``step_rewards`` (one per assistant turn), and ``prompt_token_ids`` when recorded."""

    messages: list[ChatMessage] | None = None
    response: TextOrMessages | None = None
    reward: Number
    step_rewards: list[Number] | None = None
    prompt_token_ids: list[TokenId] | None = None  # the prompt's ids, first assistant header included

    _completion = field_validator("messages", "response")(lambda v: _needs_assistant(_non_empty(v)))

    @model_validator(mode="after")
    def _has_completion(self) -> GRPOTrajectory:
        if self.messages is None and self.response is None:
            raise PydanticCustomError("shape", "needs 'messages' or 'response'")
        return self

    def recorded_token_ids(self) -> list[list[int]] | None:
        """``[prompt ids, ids of message 0, ids of message 1, ...]`` when the whole sequence the
        policy saw was recorded (``prompt_token_ids`` and every message's ``token_ids``), else None."""
        return _recorded(self.prompt_token_ids, self.messages)


class GRPORecord(_Record):
    """One task's group: several scored attempts at the same ``prompt``, whose rewards are
    normalised within the group."""

    prompt: TextOrMessages
    trajectories: list[GRPOTrajectory]

    _non_empty_group = field_validator("trajectories")(_non_empty)


class PreferenceRecord(_Model):
    """A line of ``knowlyr-reward pairs`` output: two scored trajectories of one task."""

    task_id: TaskId = None
    chosen: Trajectory
    rejected: Trajectory
    margin: Number = 0.0

    @field_validator("chosen", "rejected")
    @classmethod
    def _has_steps(cls, value: Trajectory) -> Trajectory:
        if not value.steps:  # a DPO completion is its assistant turns
            raise _field_error(("steps",), "empty", "has no steps to train on", [])
        return value


# ------------------------------------------------------------------------ pairing

#: how ``pair_preferences`` pairs the attempts at a task
PAIRINGS = ("best_vs_worst", "all_above_margin")
DEFAULT_PAIRING = "best_vs_worst"
DEFAULT_MIN_MARGIN = 0.1


class PreferencePair(NamedTuple, Generic[T]):
    task_id: str
    chosen: T
    rejected: T
    margin: float  # chosen's reward minus rejected's, > 0


def pair_preferences(
    items: Iterable[T],
    *,
    task_id: Callable[[T], str | None],
    reward: Callable[[T], float | None],
    failed: Callable[[T], bool] = lambda item: False,
    pairing: str = DEFAULT_PAIRING,
    min_margin: float = DEFAULT_MIN_MARGIN,
    max_pairs_per_task: int | None = None,
    on_skip: Callable[[str], None] | None = None,
) -> list[PreferencePair[T]]:
    """DPO pairs of attempts at the same task: the one rule ``knowlyr-reward pairs`` and
    ``knowlyr-hub export --format dpo`` both apply.

    ``best_vs_worst`` (the default) pairs each task's best attempt against its worst: one pair
    per task, each task weighing the same. ``all_above_margin`` pairs every two attempts, up to
    ``max_pairs_per_task`` of them (largest margins first). Either way a pair's rewards differ by
    at least ``min_margin`` (and are not equal), and a pair whose chosen attempt ``failed`` is left
    out: preferring one failure to another teaches a failure (failures stay as rejected ones).
    Tasks come in order of first appearance, ties keep the input order.

    What is left out is reported to ``on_skip``, once per item (``unscored``: no reward,
    ``no_task_id``) or per task (``single_attempt``, ``margin_too_small``, ``chosen_failed``).
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    if not 0 <= min_margin < math.inf:
        raise ValueError(f"min_margin must be a finite number >= 0, got {min_margin}")
    if max_pairs_per_task is not None and max_pairs_per_task < 1:
        raise ValueError(f"max_pairs_per_task must be >= 1, got {max_pairs_per_task}")
    skip = on_skip or (lambda reason: None)
    groups: dict[str, list[tuple[float, T]]] = {}
    for item in items:
        value, key = reward(item), task_id(item)
        if value is None:
            skip("unscored")
        elif not key:
            skip("no_task_id")
        else:
            groups.setdefault(key, []).append((value, item))
    pairs: list[PreferencePair[T]] = []
    for key, group in groups.items():
        if len(group) < 2:
            skip("single_attempt")
            continue
        if pairing == "best_vs_worst":
            ranked = sorted(group, key=lambda scored: scored[0], reverse=True)  # stable: ties keep input order
            candidates = [(ranked[0], ranked[-1])]
        else:
            candidates = [(a, b) if a[0] >= b[0] else (b, a) for a, b in combinations(group, 2)]
        wide = [(c, r) for c, r in candidates if c[0] - r[0] >= min_margin and c[0] > r[0]]
        if not wide:
            skip("margin_too_small")
            continue
        kept = [(c, r) for c, r in wide if not failed(c[1])]
        if not kept:
            skip("chosen_failed")
            continue
        kept.sort(key=lambda cr: cr[1][0] - cr[0][0])  # largest margin first
        pairs += [PreferencePair(key, c[1], r[1], c[0] - r[0]) for c, r in kept[:max_pairs_per_task]]
    return pairs


class PRMRecord(_Record):
    """One labelled example for a learned process reward model: what the scorer reads after a
    step (``text``: the task and the steps so far, as ``knowlyrcore.prefix_text.step_prefixes``
    renders them) and ``label``, the probability that the task still succeeds from there (a
    Monte-Carlo estimate: the mean outcome of continuations from that step; 0 or 1 for a final
    step, whose outcome is known).

    ``trajectory_id`` and ``step`` say where the prefix comes from; ``group`` names what a
    held-out split leaves out (the task's template), so a scorer can be measured on groups it
    never saw. Prefixes of the same ``task_id`` with different labels form the pairs of the
    pairwise loss.
    """

    text: str = Field(min_length=1)
    label: Annotated[float, BeforeValidator(_number), Field(ge=0.0, le=1.0)]
    trajectory_id: str | None = None
    step: Annotated[int, Field(strict=True, ge=0)] | None = None
    group: str | None = None
    continuations: Annotated[int, Field(strict=True, ge=0)] | None = None  # how many runs the label averages
