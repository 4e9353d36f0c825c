"""The demo's demonstration data: only demonstrated templates reach SFT and DPO records."""

import json
from pathlib import Path

import pytest

from agentsandbox.suites import get_suite
from knowlyrcore import read_jsonl
from knowlyrcore.testing import import_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def demo():
    return import_file(EXAMPLES / "demo.py", "demo_example")


def test_sft_and_dpo_records_hold_no_verifier_only_template(demo, tmp_path):
    suite = get_suite("retail")
    train = suite.generate("train", 27, 5)
    demo.expert_data(suite, train, tmp_path)
    verifier_only = suite.generate("train-verifier-only", 30, 5) + suite.generate("test-verifier-only", 30, 5)
    requests = {t["description"]: t["metadata"]["template"] for t in train + verifier_only}
    for name in ("sft.jsonl", "dpo.jsonl"):
        records = read_jsonl(tmp_path / name)
        assert records, name
        for record in records:
            text = json.dumps(record, ensure_ascii=False)
            templates = {template for request, template in requests.items() if json.dumps(request)[1:-1] in text}
            assert templates, (name, text[:200])  # every record is one of the train tasks
            assert all(suite.role_of(t) == "demonstrated" for t in templates), (name, templates)


def test_expert_data_refuses_a_verifier_only_task(demo, tmp_path):
    suite = get_suite("retail")
    tasks = suite.generate("train", 3, 0) + suite.generate("train-verifier-only", 1, 0)
    with pytest.raises(ValueError, match="verifier-only templates"):
        demo.expert_data(suite, tasks, tmp_path)
    assert not (tmp_path / "sft.jsonl").exists()


def test_the_roles_table_puts_each_arm_on_each_role_with_its_interval(demo):
    def stage(name, split, wins, n):
        return {"name": name, "split": split, "n": n, "success_rate": wins / n, "ci95": [0.1, 0.9]}

    stages = [
        stage("sft", "test", 14, 50),
        stage("sft", "test-verifier-only", 0, 48),
        stage("rl", "test", 15, 50),
        stage("rl", "test-verifier-only", 6, 48),
    ]
    table = demo.roles_table(stages)
    assert table["header"] == ["arm", "demonstrated (test)", "verifier-only (test-verifier-only)"]
    assert table["rows"] == [
        ["sft", "28% [10%, 90%] (14/50)", "0% [10%, 90%] (0/48)"],
        ["rl", "30% [10%, 90%] (15/50)", "12% [10%, 90%] (6/48)"],
    ]
