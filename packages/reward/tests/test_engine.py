import json

import pytest

from agentreward import RewardEngine, TrajectoryFormatError, read_trajectory_dicts
from knowlyrcore import Trajectory


def two_step(make_step, success=None):
    read = make_step("read_file", {"path": "sort.py"}, "def sort")
    return {
        "id": "t1",
        "task": {"id": "task-1", "description": "look at sort.py", "domain": "coding"},
        "steps": [read, dict(read)],
        "outcome": {"success": success},
        "extra_field": {"kept": True},
    }


def test_step_rewards_hand_derived(make_step):
    """Coding weights (0.30, 0.20, 0.20, 0.15, 0.15) over (goal, tool, param, info, redundancy).

    step 0 rubric scores (0.9, 1, 1, 1, 1): 0.30*0.9 + 0.20 + 0.20 + 0.15 + 0.15 = 0.97
    step 1 (an exact repeat) (0, 1, 1, 1, 0): 0.20 + 0.20 + 0.15 = 0.55
    total, outcome unknown: mean 0.76 + redundant_call penalty -0.2 * 1 / 2 steps = 0.66
    """
    scored = RewardEngine().score_record(two_step(make_step))
    assert [s["reward"] for s in scored["steps"]] == pytest.approx([0.97, 0.55])
    assert scored["reward"] == pytest.approx(0.66)
    assert scored["steps"][1]["metadata"]["reward_flags"] == ["redundant"]


def test_outcome_blends_into_total(make_step):
    """success=True: last step goal becomes 1.0 -> step 1 reward 0.55 + 0.30 = 0.85;
    mean (0.97 + 0.85) / 2 = 0.91; total = 0.6 * 0.91 + 0.4 * 1 - 0.1 = 0.846."""
    scored = RewardEngine().score_record(two_step(make_step, success=True))
    assert scored["reward"] == pytest.approx(0.846)


def test_domain_override_and_custom_weights(make_step):
    t = two_step(make_step)
    generic = RewardEngine(domain="generic").score_record(t)
    # generic weighs all five equally: step 1 = (0 + 1 + 1 + 1 + 0) / 5
    assert generic["steps"][1]["reward"] == pytest.approx(0.6)
    only_redundancy = RewardEngine(weights={"non_redundancy": 2.0}).score_record(t)
    assert [s["reward"] for s in only_redundancy["steps"]] == [1.0, 0.0]


def test_input_is_not_modified_and_unknown_fields_pass_through(make_step):
    t = two_step(make_step)
    before = json.dumps(t, sort_keys=True)
    scored = RewardEngine().score_record(t)
    assert json.dumps(t, sort_keys=True) == before
    assert scored["extra_field"] == {"kept": True} and scored["id"] == "t1"


def as_trajectory(record):
    """The knowlyrcore model of a test record (its unknown fields dropped, steps numbered)."""
    known = {k: v for k, v in record.items() if k in Trajectory.model_fields}
    return Trajectory.model_validate({**known, "steps": [{"index": i, **s} for i, s in enumerate(record["steps"])]})


def test_score_fills_the_trajectory_models_reward_fields(make_step):
    trajectory = as_trajectory(two_step(make_step, success=True))
    before = trajectory.model_copy(deep=True)
    scored = RewardEngine().score(trajectory)
    assert type(scored) is Trajectory and trajectory == before  # a scored copy
    assert scored.step_rewards == pytest.approx([0.97, 0.85])
    assert scored.steps[1].rubric_scores["non_redundancy"] == 0.0
    assert scored.steps[1].metadata["reward_flags"] == ["redundant"]
    assert scored.reward == pytest.approx(0.846)
    assert scored.outcome == trajectory.outcome and scored.task == trajectory.task


def test_score_refuses_what_is_not_a_trajectory():
    with pytest.raises(TypeError, match="score takes a knowlyrcore.Trajectory, got list"):
        RewardEngine().score([])
    with pytest.raises(TypeError, match="score takes a knowlyrcore.Trajectory, got dict"):
        RewardEngine().score({"steps": []})  # a JSONL record is score_record's


def test_penalties_and_outcome_weight_validation():
    with pytest.raises(ValueError, match="outcome_weight"):
        RewardEngine(outcome_weight=1.5)


def test_score_file_round_trip(make_step, tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text("\n".join(json.dumps(two_step(make_step)) for _ in range(3)) + "\n")
    out = tmp_path / "scored.jsonl"
    assert RewardEngine().score_file(src, out) == 3
    assert [t["reward"] for t in read_trajectory_dicts(out)] == pytest.approx([0.66] * 3)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"steps": 3}', "t.jsonl:2: steps: must be a list"),
        (
            '{"steps": [{"tool_call": {"name": ""}}]}',
            "t.jsonl:2: steps[0].tool_call: must be an object with a non-empty name",
        ),
        (
            '{"steps": [{"tool_call": {"name": "a", "parameters": []}}]}',
            "steps[0].tool_call.parameters: must be an object",
        ),
        ('{"steps": [}', "t.jsonl:2: invalid JSON"),
    ],
)
def test_bad_records_name_file_line_and_field(tmp_path, line, message):
    src = tmp_path / "t.jsonl"
    src.write_text('{"steps": []}\n' + line + "\n")
    with pytest.raises(TrajectoryFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        list(read_trajectory_dicts(src))


def test_json_list_files_are_read(tmp_path):
    src = tmp_path / "t.json"
    src.write_text(json.dumps([{"steps": []}, {"steps": []}]))
    assert len(list(read_trajectory_dicts(src))) == 2


def test_binary_file(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_bytes(b"\x00\x01\xff\xfe")
    with pytest.raises(TrajectoryFormatError, match="t.jsonl:1: not UTF-8"):
        list(read_trajectory_dicts(src))
