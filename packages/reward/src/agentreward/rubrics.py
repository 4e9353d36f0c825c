"""Rubrics: the dimensions a step is scored on, and how each domain weighs them.

Two rubrics are judged by rules (``info_utilization``, ``non_redundancy``) and three by a
model (``goal_progress``, ``tool_selection``, ``param_correctness``). Without a judge the rule
layer gives heuristic scores for the model rubrics too, so every layer stack yields all five.
The domain weights are knowlyr-core's built-in DomainProfiles' ``rubric_weights``; a YAML or
JSON file can override them (``load_weights``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from agentreward.errors import RewardError
from knowlyrcore.builtin_domains import BUILTIN_DOMAINS

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class Rubric:
    """One scoring dimension. ``evaluator`` says which layer owns it: ``rule`` or ``model``."""

    name: str
    description: str
    evaluator: str


RUBRICS: dict[str, Rubric] = {
    r.name: r
    for r in [
        Rubric("goal_progress", "Does the step move the task toward its goal?", "model"),
        Rubric("tool_selection", "Is this the right tool for what the step needs?", "model"),
        Rubric("param_correctness", "Are the tool's parameters correct and well-formed?", "model"),
        Rubric("info_utilization", "Does the step use information from the task and earlier observations?", "rule"),
        Rubric("non_redundancy", "Does the step avoid repeating an earlier action?", "rule"),
    ]
}

MODEL_RUBRICS = tuple(n for n, r in RUBRICS.items() if r.evaluator == "model")
RULE_RUBRICS = tuple(n for n, r in RUBRICS.items() if r.evaluator == "rule")


#: The raw rubric weights of each built-in domain. knowlyr-core's DomainProfiles hold the one
#: table (``rubric_weights``); ``domain_weights`` normalises them.
DOMAIN_WEIGHTS: dict[str, dict[str, float]] = {
    name: dict(profile.rubric_weights) for name, profile in BUILTIN_DOMAINS.items()
}

#: Trajectory-level penalties (seed 003), applied once per offending step to the total.
DEFAULT_PENALTIES: dict[str, float] = {
    "wrong_tool": -0.3,  # a tool the domain does not have, or one that does not exist
    "redundant_call": -0.2,  # an exact repeat of an earlier call
    "format_error": -0.1,  # an action the environment could not parse
    "timeout": -0.5,  # a command killed by its time limit
}

#: Trajectory-level penalties of the conversation rules (agentreward.rules), applied with
#: ``RewardEngine(conversation_rules=True)`` (``--conversation-rules``). Off by default: on
#: held-out tau-bench airline runs the rules' effect on the reward lowered its AUC for success
#: (see the package README); the rules still flag the steps.
CONVERSATION_PENALTIES: dict[str, float] = {
    "unconfirmed_action": -0.3,  # a consequential action the user had not said yes to
    "ungrounded_argument": -0.3,  # an id or number in an action that nothing earlier showed
    "repeated_action": -0.2,  # the same action on the same ids, already done
    "action_after_done": -0.3,  # acting after the user closed the conversation
    "needless_transfer": -0.3,  # a hand-off to a human nobody asked for
    "gave_up": -0.2,  # ending on "I cannot help" without having done anything
}


def domain_weights(domain: str) -> dict[str, float]:
    """The rubric weights of ``domain``, normalised to sum to 1 (generic for unknown domains)."""
    return normalise(DOMAIN_WEIGHTS.get(domain, DOMAIN_WEIGHTS["generic"]))


def normalise(weights: dict[str, float]) -> dict[str, float]:
    unknown = set(weights) - set(RUBRICS)
    if unknown:
        # only name-like keys are echoed: the file may be any host file passed as --weights
        named = sorted(k for k in unknown if _NAME.fullmatch(k))
        others = (
            f" and {len(unknown) - len(named)} key(s) that are not rubric names" if len(named) < len(unknown) else ""
        )
        raise RewardError(f"unknown rubric(s) {named}{others}; known: {', '.join(RUBRICS)}")
    if not all(math.isfinite(w) for w in weights.values()):
        raise RewardError("rubric weights must be finite numbers (no NaN/Infinity)")
    if any(w < 0 for w in weights.values()):
        raise RewardError("rubric weights must be non-negative")
    total = sum(weights.values())
    if total <= 0:
        raise RewardError("at least one rubric weight must be positive")
    return {k: v / total for k, v in weights.items()}


def load_weights(path: str | Path) -> dict[str, float]:
    """Read ``{rubric: weight}`` from a YAML or JSON file (optionally under a ``rubric_weights`` key)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except OSError as exc:
        raise RewardError(f"{path}: cannot read weights ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise RewardError(f"{path}: cannot read weights (not UTF-8 text)") from None
    except Exception as exc:  # a YAML/JSON error: name the line, never echo the file's text
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else getattr(exc, "lineno", None)
        raise RewardError(f"{path}{f':{line}' if line else ''}: weights are not valid YAML/JSON") from None
    if isinstance(data, dict) and isinstance(data.get("rubric_weights"), dict):
        data = data["rubric_weights"]
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise RewardError(f"{path}: weights must be a mapping of rubric name to number")
    try:
        return normalise({str(k): float(v) for k, v in data.items()})
    except RewardError as exc:
        raise RewardError(f"{path}: {exc}") from None
