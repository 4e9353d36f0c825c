"""Real agent logs from public projects become training data in one command.

../shared/data/real holds logs from SWE-agent, mini-swe-agent, OpenHands, tau-bench and
Who&When (see its README); the pipeline converts, scores, deduplicates and exports them, and
the trainer's readers accept every exported record.
"""

from __future__ import annotations

import json

import pytest

from knowlyrcore.testing import require_module

# `make test` installs every package: the pipeline's optional stages are all there
require_module("agentrecorder", "the pipeline converts logs with knowlyr-recorder")
require_module("agentreward", "the pipeline scores with knowlyr-reward")

from trajectoryhub.cli import main  # noqa: E402

pytestmark = pytest.mark.integration


def test_real_logs_to_datasets(real_logs_folder, tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text('{"trajectory": [')
    # by default the first bad file stops the run, with nothing written
    assert main(["pipeline", str(real_logs_folder), str(broken), "-o", str(tmp_path / "strict")]) == 2
    assert f"{broken}:" in capsys.readouterr().err and not list((tmp_path / "strict").glob("run-*"))
    # --skip-invalid reports it and converts the rest
    args = ["pipeline", str(real_logs_folder), str(broken), "-o", str(tmp_path / "out"), "--skip-invalid"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["converted"]["files"] == 16
    assert [e.split(":")[0] for e in report["errors"]] == [str(broken)]
    assert set(report["converted"]["formats"]) == {
        "swe-agent",
        "mini-swe-agent",
        "openhands",
        "openai-chat",
        "who-and-when",
    }
    assert report["trajectories"] + report["duplicates"] == 34 and report["scored"] == report["trajectories"]
    sft = report["exports"]["sft"]  # the successful trajectories only; the others are counted
    assert sft["written"] >= 1 and sft["written"] + sft["skipped"].get("not_successful", 0) == report["trajectories"]
    # tau-bench holds 4 trials of each of tasks 0-4: GRPO groups them, DPO pairs the solved with the failed
    assert report["exports"]["grpo"]["written"] == 5
    assert report["exports"]["dpo"]["written"] >= 2

    scored = [json.loads(line) for line in (tmp_path / "out" / "latest" / "scored.jsonl").read_text().splitlines()]
    assert all(s["reward"] is not None and 0 <= s["reward"] <= 1 for s in scored)
    assert all("rubric_scores" in step for t in scored for step in t["steps"])
    assert sft["written"] == sum(s["outcome"]["success"] is True for s in scored)

    agenttrainer = require_module("agenttrainer.data.readers", "the exports are read with knowlyr-trainer's readers")
    for name, reader in (
        ("sft", agenttrainer.sft_conversation),
        ("dpo", agenttrainer.dpo_pair),
        ("grpo", agenttrainer.grpo_group),
    ):
        records = list(agenttrainer.read_located_records(tmp_path / "out" / "latest" / f"{name}.jsonl"))
        assert records, name
        for where, record in records:
            reader(record, where)
