"""The standard suite every reward layer passes: subclass ``LayerConformance`` with ``make_engine``.

    from agentreward.testing import LayerConformance

    class TestMyLayer(LayerConformance):
        def make_engine(self):
            return RewardEngine(layers=("rules", "learned"), prm="runs/prm")

``make_engine`` returns a new ``RewardEngine`` scoring with the layer under test (alone or with
others). The suite checks, on a conversation and a coding trajectory carrying the labels public
data sets carry (gold actions, a labelled mistake step, human step scores, a reward breakdown):

- one finite reward per step, each and the total in [0, 1], with the outcome unknown, a success
  or a failure;
- scoring is deterministic and leaves the input record as it was;
- the step rewards do not change when the labels are hidden (``agentreward.quality.hide_labels``)
  with the outcome absent: a layer must not read the answer;
- a trajectory without steps, and trajectories with a huge, a non-ASCII (lone surrogates too) or a
  non-text observation, score without error;
- a malformed record is refused with a one-line ``RewardError``;
- scoring A then B gives what scoring B then A gives, on fresh engines: nothing leaks from one
  trajectory into the next;
- ``score(Trajectory)`` returns a ``Trajectory`` with the rewards ``score_record`` gives.

Needs pytest (the ``dev`` extra).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from agentreward.errors import RewardError
from agentreward.quality import hide_labels
from knowlyrcore.trajectory import Trajectory

#: a tau-bench-like conversation: labelled with the gold actions, the user's hidden instruction,
#: a reward breakdown, a mistake step and human step scores; no outcome
CONVERSATION: dict[str, Any] = {
    "id": "suite-conversation",
    "task": {
        "id": "cancel-order",
        "domain": "conversation",
        "description": "Hi, I want to cancel order #W2378156 and get the refund on my gift card.",
        "metadata": {
            "expected_actions": [
                {"name": "cancel_pending_order", "arguments": {"order_id": "#W2378156", "reason": "no longer needed"}}
            ],
            "instruction": "You are Yusuf. Cancel #W2378156; accept only a gift-card refund.",
        },
    },
    "steps": [
        {
            "thought": "Look the order up before anything else.",
            "tool_call": {"name": "get_order_details", "parameters": {"order_id": "#W2378156"}},
            "observation": {"output": '{"status": "pending", "payment": "gift_card_7794", "total": 120.5}'},
            "metadata": {"human_score": 0.9},
        },
        {
            "tool_call": {
                "name": "respond",
                "parameters": {"message": "It is pending. Cancel it, refund to the card?"},
            },
            "observation": {"output": "Yes, please go ahead."},
        },
        {
            "tool_call": {
                "name": "cancel_pending_order",
                "parameters": {"order_id": "#W2378165", "reason": "no longer needed"},
            },
            "observation": {"output": "", "error": "order #W2378165 not found", "exit_code": 1},
            "metadata": {"mistake": True, "mistake_reason": "a transposed order id", "human_score": 0.1},
        },
        {
            "tool_call": {
                "name": "cancel_pending_order",
                "parameters": {"order_id": "#W2378156", "reason": "no longer needed"},
            },
            "observation": {"output": '{"status": "cancelled", "refund": 120.5}'},
        },
        {
            "tool_call": {"name": "respond", "parameters": {"message": "Done: 120.50 back on your gift card."}},
            "observation": {"output": "Thanks! ###STOP###"},
        },
    ],
    "metadata": {"reward_info": {"reward": 0.0, "r_actions": False}, "mistake_step": 2, "mistake_agent": "agent"},
}

#: a coding run: an edit, a failing and a passing test run, a repeated read; no outcome
CODING: dict[str, Any] = {
    "id": "suite-coding",
    "task": {
        "id": "fix-sort",
        "domain": "coding",
        "description": "Fix the off-by-one in sort.py so the tests pass.",
        "metadata": {"solution": "replace range(len(xs) - 1) with range(len(xs))"},
    },
    "steps": [
        {
            "tool_call": {"name": "read_file", "parameters": {"path": "sort.py"}},
            "observation": {"output": "def sort(xs):\n    for i in range(len(xs) - 1):\n        ..."},
        },
        {
            "tool_call": {"name": "bash", "parameters": {"command": "pytest -q"}},
            "observation": {"output": "1 failed, 3 passed", "exit_code": 1},
        },
        {
            "tool_call": {
                "name": "edit_file",
                "parameters": {"path": "sort.py", "old_str": "range(len(xs) - 1)", "new_str": "range(len(xs))"},
            },
            "observation": {"output": "edited sort.py"},
            "metadata": {"human_score": 1.0},
        },
        {
            "tool_call": {"name": "bash", "parameters": {"command": "pytest -q"}},
            "observation": {"output": "4 passed", "exit_code": 0},
        },
        {
            "tool_call": {"name": "read_file", "parameters": {"path": "sort.py"}},
            "observation": {"output": "def sort(xs):\n    for i in range(len(xs)):\n        ..."},
        },
    ],
}

SAMPLES = (CONVERSATION, CODING)


def _one_step(observation: dict[str, Any], params: Any = None) -> dict[str, Any]:
    return {
        "id": "suite-edge",
        "task": {"description": "inspect the output"},
        "steps": [{"tool_call": {"name": "run", "parameters": params or {}}, "observation": observation}],
    }


#: name -> a trajectory that is valid but unusual; each must score
EDGE_CASES: dict[str, dict[str, Any]] = {
    "no steps": {"id": "suite-empty", "task": {"description": "nothing to do"}, "steps": []},
    "no steps, outcome known": {"task": {"description": "nothing to do"}, "steps": [], "outcome": {"success": True}},
    "a 2 MB observation": _one_step({"output": "line of output 12345\n" * 100_000}, {"arg": "x" * 100_000}),
    "non-ASCII text": _one_step(
        {"output": "résumé 東京 Ελλάδα עברית مرحبا 🙂👍🏽 e\u0301 \u200b\u202e zero-width and RTL"},
        {"query": "café ☕ 中文"},
    ),
    "lone surrogates": _one_step({"output": "half a pair: \ud83d and \udc00"}, {"q": "\ud800"}),
    "control characters": _one_step({"output": "\x00\x01\x1b[31mred\x1b[0m\x7f\r\n\t"}),
    "broken JSON text": _one_step({"output": '{"rows": [1, 2, {"a": NaN'}),
    "an object output": _one_step({"output": {"rows": [{"id": 1}, None], "more": {"deep": [[[]]]}}}),
    "a list output": _one_step({"output": [1, "two", None, {"three": 3.0}]}),
    "a number output": _one_step({"output": 1e308, "exit_code": 0}),
    "a null output and an object error": _one_step({"output": None, "error": {"code": 500, "detail": "boom"}}),
    "odd parameters": _one_step({"output": "ok"}, {"a": None, "b": [{}], "c": 1e300, "d": True, "e": ""}),
    "null metadata": {
        "task": {"description": "x", "metadata": None},
        "steps": [{"tool_call": {"name": "ls"}, "observation": {"output": "a"}, "metadata": None}],
        "metadata": None,
        "outcome": None,
    },
}

#: name -> a record scoring must refuse (with a one-line RewardError)
MALFORMED: dict[str, Any] = {
    "not an object": ["steps"],
    "steps not a list": {"steps": {"0": {"tool_call": {"name": "ls"}}}},
    "steps missing": {"task": {"description": "x"}},
    "a step that is not an object": {"steps": [None]},
    "a step without tool_call": {"steps": [{"observation": {"output": "x"}}]},
    "a tool_call that is a string": {"steps": [{"tool_call": "ls -la"}]},
    "a tool_call without a name": {"steps": [{"tool_call": {"parameters": {}}}]},
    "parameters not an object": {"steps": [{"tool_call": {"name": "ls", "parameters": ["-la"]}}]},
    "an observation that is a string": {"steps": [{"tool_call": {"name": "ls"}, "observation": "a.py"}]},
    "step metadata that is a string": {"steps": [{"tool_call": {"name": "ls"}, "metadata": "note"}]},
    "a task that is a string": {"task": "fix it", "steps": []},
    "an outcome that is a string": {"steps": [{"tool_call": {"name": "ls"}}], "outcome": "success"},
}


def _as_model(record: dict[str, Any]) -> Trajectory:
    """The ``Trajectory`` of a record: its steps numbered, the fields the model has not dropped."""
    known = {k: v for k, v in record.items() if k in Trajectory.model_fields}
    return Trajectory.model_validate({**known, "steps": [{"index": i, **s} for i, s in enumerate(record["steps"])]})


class LayerConformance:
    """Subclass and implement ``make_engine``."""

    def make_engine(self) -> Any:
        """A new ``RewardEngine`` that scores with the layer under test."""
        raise NotImplementedError("return a RewardEngine using the layer under test")

    def assert_scored(self, record: dict[str, Any], scored: dict[str, Any]) -> None:
        """One finite reward in [0, 1] per step of ``record``, and a total in [0, 1]."""
        assert isinstance(scored, dict)
        assert len(scored["steps"]) == len(record["steps"]), "one scored step per step"
        for i, step in enumerate(scored["steps"]):
            reward = step.get("reward")
            assert isinstance(reward, float) and math.isfinite(reward), f"steps[{i}].reward = {reward!r}"
            assert 0.0 <= reward <= 1.0, f"steps[{i}].reward = {reward} is outside [0, 1]"
        total = scored.get("reward")
        assert isinstance(total, float) and math.isfinite(total) and 0.0 <= total <= 1.0, f"reward = {total!r}"

    # -- the suite ------------------------------------------------------------------------------

    def test_one_reward_per_step_in_the_unit_interval(self):
        engine = self.make_engine()
        for sample in SAMPLES:
            for outcome in (None, {"success": True, "score": 1.0}, {"success": False, "score": 0.0}):
                record = {**sample, "outcome": outcome} if outcome else sample
                self.assert_scored(record, engine.score_record(record))

    def test_scoring_is_deterministic(self):
        engine = self.make_engine()
        for sample in SAMPLES:
            assert engine.score_record(sample) == engine.score_record(sample), sample["id"]

    def test_the_input_is_not_changed(self):
        engine = self.make_engine()
        for sample in (*SAMPLES, *EDGE_CASES.values()):
            before = copy.deepcopy(sample)
            engine.score_record(sample)
            assert sample == before, sample.get("id")

    def test_step_rewards_do_not_read_the_labels(self):
        engine = self.make_engine()
        for sample in SAMPLES:
            assert "outcome" not in sample  # the rules read a known outcome on purpose: not here
            hidden = hide_labels(sample)
            assert hidden != sample, "the sample carries labels to hide"
            with_labels = [s["reward"] for s in engine.score_record(sample)["steps"]]
            without = [s["reward"] for s in engine.score_record(hidden)["steps"]]
            assert with_labels == without, f"{sample['id']}: the step rewards change when the labels are hidden"

    def test_unusual_trajectories_score(self):
        engine = self.make_engine()
        for name, record in EDGE_CASES.items():
            try:
                scored = engine.score_record(record)
            except Exception as exc:  # the case's name says which input broke the layer
                raise AssertionError(f"{name}: {type(exc).__name__}: {exc}") from exc
            self.assert_scored(record, scored)
            if record["steps"]:
                json.dumps(scored, allow_nan=False)  # writable as a JSON line: no NaN crept in

    def test_malformed_records_are_one_line_errors(self):
        engine = self.make_engine()
        for name, record in MALFORMED.items():
            try:
                engine.score_record(record)
            except RewardError as exc:
                assert str(exc) and "\n" not in str(exc), f"{name}: {exc!r}"
            except Exception as exc:
                raise AssertionError(f"{name}: {type(exc).__name__} escaped instead of a RewardError: {exc}") from exc
            else:
                raise AssertionError(f"{name}: scored instead of refused")

    def test_no_state_leaks_between_trajectories(self):
        first, second = CONVERSATION, CODING
        engine = self.make_engine()
        in_order = [engine.score_record(first), engine.score_record(second)]
        engine = self.make_engine()
        reversed_order = [engine.score_record(second), engine.score_record(first)]
        assert in_order == reversed_order[::-1]

    def test_score_returns_a_trajectory(self):
        engine = self.make_engine()
        for sample in SAMPLES:
            trajectory = _as_model({**sample, "outcome": {"success": True}})
            scored = engine.score(trajectory)
            assert type(scored) is Trajectory
            record = engine.score_record(trajectory.model_dump(mode="json"))
            assert scored.step_rewards == [s["reward"] for s in record["steps"]]
            assert scored.reward == record["reward"]


def write_tiny_text_model(directory: str | Path, tokenizer: Any, *, max_positions: int = 256) -> Path:
    """A random one-layer BERT (hidden size 32) with ``tokenizer``, saved into ``directory``: a
    text model to train a process reward model on in seconds. Seeded: the same model each time."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_positions,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)
