import json
import random

import pytest

from agentreward import CalibrationError, Calibrator, agreement, labels_from_metadata, load_labels


def synthetic(n=40, seed=0):
    """Human labels follow info_utilization alone; the other rubrics are noise."""
    rng = random.Random(seed)
    rubrics, human = [], []
    for _ in range(n):
        r = {k: rng.random() for k in ("goal_progress", "tool_selection", "param_correctness", "non_redundancy")}
        r["info_utilization"] = rng.random()
        rubrics.append(r)
        human.append(r["info_utilization"])
    return rubrics, human


def test_recovers_the_rubric_humans_follow():
    rubrics, human = synthetic()
    baseline = [sum(r.values()) / 5 for r in rubrics]
    cal = Calibrator.fit(rubrics, human, baseline=baseline)
    assert cal.weights["info_utilization"] == pytest.approx(1.0, abs=1e-6)
    assert cal.slope == pytest.approx(1.0, abs=1e-6) and cal.intercept == pytest.approx(0.0, abs=1e-6)
    assert cal.report["after"]["spearman"] == pytest.approx(1.0)
    assert cal.report["after"]["spearman"] > cal.report["before"]["spearman"]
    assert cal.transform_one(0.0, {"info_utilization": 0.25, "goal_progress": 1.0}) == pytest.approx(0.25)


def test_save_and_load(tmp_path):
    rubrics, human = synthetic()
    cal = Calibrator.fit(rubrics, human)
    cal.save(tmp_path / "c.json")
    again = Calibrator.load(tmp_path / "c.json")
    assert again.weights == pytest.approx(cal.weights) and again.slope == pytest.approx(cal.slope)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(CalibrationError, match="not a calibration file"):
        Calibrator.load(tmp_path / "bad.json")


def test_too_few_or_mismatched_labels():
    with pytest.raises(CalibrationError, match="at least 4"):
        Calibrator.fit([{}] * 2, [1.0, 0.0])
    with pytest.raises(CalibrationError, match="3 scored steps but 2 labels"):
        Calibrator.fit([{}] * 3, [1.0, 0.0])


def test_agreement_is_nan_free_for_constant_input():
    assert agreement([0.5, 0.5, 0.5], [1, 0, 1])["spearman"] == 0.0


def test_labels_from_mistake_flags_and_human_scores():
    steps = [{"metadata": {}}, {"metadata": {"mistake": True}}, {"metadata": {}}]
    assert labels_from_metadata({"steps": steps}) == {0: 1.0, 1: 0.0}
    assert labels_from_metadata({"steps": [{"metadata": {"human_score": 0.3}}]}) == {0: 0.3}


def test_label_file_errors_name_line_and_field(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(
        json.dumps({"trajectory_id": "a", "step_index": 0, "score": 1})
        + "\n"
        + json.dumps({"trajectory_id": "a", "step_index": "1", "score": 1})
        + "\n"
    )
    with pytest.raises(CalibrationError, match="labels.jsonl:2: step_index"):
        load_labels(path)
    path.write_text(json.dumps({"trajectory_id": "a", "step_index": 0, "score": 3}) + "\n")
    with pytest.raises(CalibrationError, match="score: must be in"):
        load_labels(path)
