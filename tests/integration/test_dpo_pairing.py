"""One DPO pairing rule: ``knowlyr-reward pairs`` and ``knowlyr-hub export --format dpo`` give the
same pairs for the same scored trajectories and the same options (``--pairing``,
``--min-margin``, ``--max-pairs-per-task``, with the same names and defaults on both commands).

Before, the reward CLI kept every pair above the margin and the hub paired best against worst,
so the two produced different data sets from one input."""

from __future__ import annotations

import pytest

from knowlyrcore import read_jsonl, write_trajectories
from knowlyrcore.testing import require_module
from knowlyrcore.trajectory import Trajectory

reward_cli = require_module("agentreward.cli", "knowlyr-reward is installed by `make install`")
hub_cli = require_module("trajectoryhub.cli", "knowlyr-hub is installed by `make install`")

OPTIONS = [
    [],
    ["--min-margin", "0.3"],
    ["--pairing", "all_above_margin"],
    ["--pairing", "all_above_margin", "--min-margin", "0.2", "--max-pairs-per-task", "2"],
    ["--pairing", "best_vs_worst", "--min-margin", "0"],
]
# (id, task, reward, success): ties, a failed best attempt, a single attempt, a task-less run
SCORED = [
    ("a", "x", 0.9, True),
    ("b", "x", 0.1, False),
    ("c", "x", 0.6, None),
    ("d", "x", 0.1, False),
    ("e", "y", 0.8, False),
    ("f", "y", 0.5, True),
    ("g", "y", 0.2, False),
    ("h", "z", 0.7, True),
    ("i", "", 0.9, True),
    ("j", "w", 0.4, True),
    ("k", "w", 0.4, True),
]


def _trajectory(tid: str, task: str, reward: float, success: bool | None) -> Trajectory:
    step = {"index": 0, "tool_call": {"name": "respond", "parameters": {"text": tid}}, "reward": reward}
    return Trajectory.model_validate(
        {
            "id": tid,
            "task": {"id": task, "description": f"solve {task}"},
            "steps": [step],
            "outcome": {"success": success},
            "reward": reward,
        }
    )


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: " ".join(o) or "defaults")
def test_both_clis_give_the_same_pairs(tmp_path, options):
    scored = tmp_path / "scored.jsonl"
    write_trajectories(scored, [_trajectory(*row) for row in SCORED])
    assert reward_cli.main(["pairs", str(scored), "-o", str(tmp_path / "prefs.jsonl"), *options]) == 0
    argv = ["export", "--format", "dpo", "-t", str(scored), "-o", str(tmp_path / "dpo.jsonl"), *options]
    assert hub_cli.main(argv) == 0
    from_reward = [(p["chosen"]["id"], p["rejected"]["id"], p["margin"]) for p in read_jsonl(tmp_path / "prefs.jsonl")]
    from_hub = [
        (p["metadata"]["chosen_id"], p["metadata"]["rejected_id"], p["margin"])
        for p in read_jsonl(tmp_path / "dpo.jsonl")
    ]
    assert from_reward == from_hub and from_hub
    # and the preferences file, exported through the hub, gives the same records as pairing there
    argv = ["export", "--format", "dpo", "-t", str(scored), "-p", str(tmp_path / "prefs.jsonl")]
    assert hub_cli.main([*argv, "-o", str(tmp_path / "via.jsonl")]) == 0
    assert list(read_jsonl(tmp_path / "via.jsonl")) == list(read_jsonl(tmp_path / "dpo.jsonl"))


def test_defaults_pair_best_against_worst_on_both():
    """Pinned by hand: x's best (a, 0.9) against its worst (d: b and d tie at 0.1, and the ranking
    keeps input order, so d is last);
    y's best failed; z has one attempt; w's rewards are equal; i has no task."""
    from agentreward import build_preference_pairs

    pairs = build_preference_pairs(_trajectory(*row).model_dump(mode="json") for row in SCORED)
    assert [(p.chosen.id, p.rejected.id, p.margin) for p in pairs] == [("a", "d", 0.8)]


def test_the_pairing_options_have_the_same_names_and_defaults():
    def options(command):
        wanted = {"pairing", "min_margin", "max_pairs_per_task"}
        return {
            p.name: (p.opts, p.default, getattr(p.type, "choices", None)) for p in command.params if p.name in wanted
        }

    pairs, export = options(reward_cli.cli.commands["pairs"]), options(hub_cli.cli.commands["export"])
    assert pairs == export and len(pairs) == 3
    assert pairs["pairing"][1] == "best_vs_worst" and pairs["min_margin"][1] == 0.1
