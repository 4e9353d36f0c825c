"""TrajectoryStore on SQLite and on a real PostgreSQL server: one API, the same results."""

import json
import math
import uuid

import pytest

from knowlyrcore import Outcome, Step, TaskInfo, ToolCall, Trajectory
from knowlyrcore.testing import require_module
from knowlyrcore.trajectory import Observation
from trajectoryhub.cli import main
from trajectoryhub.dedup import content_hash
from trajectoryhub.store import GDIWeights, StoreError, TrajectoryStore, gdi_score

DAY = 86400.0
NOW = 1_800_000_000.0


def make(task="t1", reward=None, success=None, agent="a", domain="coding", output="ok"):
    return Trajectory(
        task=TaskInfo(id=task, description=f"task {task}", domain=domain),
        agent=agent,
        steps=[
            Step(
                index=0,
                tool_call=ToolCall(name="bash", parameters={"command": "ls"}),
                observation=Observation(output=output),
            )
        ],
        outcome=Outcome(success=success),
        reward=reward,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        url = str(tmp_path / "store.db")
    else:
        url = request.getfixturevalue("postgres").fresh_database(f"t_{uuid.uuid4().hex[:12]}")
    with TrajectoryStore(url) as s:
        yield s


def test_add_deduplicates_by_content(store):
    a, b = make(output="one"), make(output="two")
    again = make(output="one").model_copy(update={"id": "another-recording"})
    report = store.add([a, b, again])
    assert (report.added, report.duplicates) == (2, 1)
    assert report.hashes == [content_hash(a), content_hash(b), content_hash(a)]
    assert store.add(a).added == 0 and len(store) == 2
    assert content_hash(a) in store and store.get(content_hash(a)).steps[0].observation.output == "one"
    with pytest.raises(StoreError, match="no trajectory with hash"):
        store.get("0" * 64)


def test_filters(store):
    store.add([make("t1", 0.9, True, "alice"), make("t2", 0.2, False, "bob", domain="retail"),
               make("t3", None, None, "alice", output="x")], now=NOW)  # fmt: skip
    store.add(make("t4", 0.5, True, "carol", output="late"), now=NOW + 10 * DAY)
    tasks = lambda **q: sorted(r.trajectory.task.id for r in store.query(now=NOW, **q))  # noqa: E731
    assert tasks(agent="alice") == ["t1", "t3"]
    assert tasks(domain="retail") == ["t2"]
    assert tasks(success=True) == ["t1", "t4"] and tasks(success=False) == ["t2"]
    assert tasks(min_reward=0.4) == ["t1", "t4"] and tasks(max_reward=0.5) == ["t2", "t4"]
    assert tasks(since=NOW + DAY) == ["t4"] and tasks(until=NOW + DAY) == ["t1", "t2", "t3"]
    assert tasks(task="t3") == ["t3"]
    assert [r.trajectory.task.id for r in store.query(order_by="reward")] == ["t1", "t4", "t2", "t3"]
    assert store.query(order_by="time")[0].trajectory.task.id == "t4"
    assert len(store.query(limit=2)) == 2
    with pytest.raises(StoreError, match="order_by"):
        store.query(order_by="size")
    with pytest.raises(StoreError, match=r"unknown filter\(s\) \['colour'\]"):
        store.query(colour="red")


def test_gdi_order_matches_hand_computed_scores(store):
    # four trajectories stored at different ages, exported and rated differently
    old_good = make("a", reward=0.9, output="1")
    fresh_poor = make("b", reward=0.1, output="2")
    exported = make("c", reward=0.5, output="3")
    rated = make("d", reward=0.5, output="4")
    store.add(old_good, now=NOW - 100 * DAY)
    store.add([fresh_poor, exported, rated], now=NOW)
    store.record_exports([content_hash(exported)] * 1)
    store.record_exports([content_hash(exported)])
    store.record_exports([content_hash(old_good)])
    store.mark_feedback(content_hash(rated), 1.0)
    # by hand, max exports 2: utility(c) = ln 3 / ln 3 = 1, utility(a) = ln 2 / ln 3 = 0.6309
    expected = {
        "a": 0.35 * 0.9 + 0.30 * math.log(2) / math.log(3) + 0.20 * 0.5 + 0.15 / (1 + 0.05 * 100),  # 0.6293
        "b": 0.35 * 0.1 + 0.0 + 0.20 * 0.5 + 0.15 * 1.0,  # 0.2850
        "c": 0.35 * 0.5 + 0.30 * 1.0 + 0.20 * 0.5 + 0.15 * 1.0,  # 0.7250
        "d": 0.35 * 0.5 + 0.0 + 0.20 * 1.0 + 0.15 * 1.0,  # 0.5250
    }
    rows = store.query(now=NOW)
    assert [r.trajectory.task.id for r in rows] == ["c", "a", "d", "b"]
    for row in rows:
        assert row.gdi == pytest.approx(expected[row.trajectory.task.id], abs=1e-9)
    assert gdi_score(reward=0.9, exports=1, max_exports=2, feedback=0.5, age_days=100) == pytest.approx(expected["a"])


def test_gdi_weights_are_configurable_and_validated(tmp_path):
    weights = GDIWeights(intrinsic=1, utility=0, feedback=0, freshness=0)
    with TrajectoryStore(tmp_path / "w.db", weights=weights) as store:
        store.add([make("lo", 0.2, output="1"), make("hi", 0.7, output="2")], now=NOW)
        assert [(r.trajectory.task.id, r.gdi) for r in store.query(now=NOW)] == [("hi", 0.7), ("lo", 0.2)]
    assert GDIWeights(2, 2, 0, 0).intrinsic == 0.5  # normalised
    assert GDIWeights.parse("intrinsic=1,utility=1").feedback == pytest.approx(0.2 / 2.35)
    for bad in ({"intrinsic": -1}, {"utility": float("nan")}, {"intrinsic": 0, "utility": 0, "feedback": 0,
                                                                "freshness": 0}):  # fmt: skip
        with pytest.raises(StoreError, match="GDI weight"):
            GDIWeights(**bad)
    with pytest.raises(StoreError, match="name=value"):
        GDIWeights.parse("speed=1")


def test_feedback_is_checked(store):
    store.add(make())
    with pytest.raises(StoreError, match=r"in \[0, 1\]"):
        store.mark_feedback(content_hash(make()), 2)
    with pytest.raises(StoreError, match="no trajectory"):
        store.mark_feedback("f" * 64, 0.3)


def test_exports_count_and_load_with_datasets(store, tmp_path):
    datasets = require_module("datasets", "loading the export needs datasets, in knowlyr-hub[dev]")
    store.add([make(f"t{i}", i / 10, i % 2 == 0, output=str(i)) for i in range(6)], now=NOW)
    assert store.export_jsonl(tmp_path / "top.jsonl", order_by="reward", limit=3) == 3
    lines = [json.loads(line) for line in (tmp_path / "top.jsonl").read_text().splitlines()]
    assert [line["task"]["id"] for line in lines] == ["t5", "t4", "t3"]
    assert store.export_parquet(tmp_path / "all.parquet", success=True) == 3
    loaded = datasets.load_dataset("parquet", data_files=str(tmp_path / "all.parquet"))["train"]
    assert sorted(loaded["task_id"]) == ["t0", "t2", "t4"]
    assert Trajectory.model_validate_json(loaded[0]["trajectory"]).task.id == loaded[0]["task_id"]
    assert {r.trajectory.task.id: r.exports for r in store.query()} == {"t5": 1, "t4": 2, "t3": 1, "t2": 1, "t1": 0,
                                                                       "t0": 1}  # fmt: skip
    assert store.stats()["exports"] == 6


def test_stats(store):
    store.add(
        [make("a", 1.0, True, "x"), make("b", 0.0, False, "y", output="2"), make("c", None, None, "x", output="3")]
    )
    stats = store.stats()
    assert stats["trajectories"] == 3 and stats["success_rate"] == 0.5 and stats["mean_reward"] == 0.5
    assert stats["by_agent"] == {"x": 2, "y": 1} and stats["engine"] in ("sqlite", "postgres")


def test_bad_urls_are_one_line_errors(tmp_path):
    not_db = tmp_path / "notes.db"
    not_db.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        TrajectoryStore(not_db)
    # without psycopg the store says to install it instead (a broken dev install: psycopg is in [dev])
    require_module("psycopg", "the PostgreSQL store needs psycopg: pip install 'knowlyr-hub[postgres]'")
    with pytest.raises(StoreError, match=r"cannot connect to postgresql://u:\*\*\*@127.0.0.1:1/x"):
        TrajectoryStore("postgresql://u:secret@127.0.0.1:1/x")


def test_cli_add_list_export_stats(tmp_path, capsys):
    db = str(tmp_path / "cli.db")
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(make(f"t{i}", i / 4, i > 1, output=str(i)).model_dump_json() + "\n" for i in range(4)))
    assert main(["store", "add", str(runs), "--db", db]) == 0
    assert "4 new, 0 already stored" in capsys.readouterr().err
    assert main(["store", "add", str(runs), "--db", db]) == 0
    assert "0 new, 4 already stored" in capsys.readouterr().err
    assert main(["store", "list", "--db", db, "--order", "reward", "--limit", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["hash", "gdi", "reward"] and "t3" in out[1] and "t2" in out[2] and len(out) == 3
    assert main(["store", "export", "--db", db, "-o", str(tmp_path / "ok.jsonl"), "--success"]) == 0
    assert len((tmp_path / "ok.jsonl").read_text().splitlines()) == 2
    assert main(["store", "stats", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out)["exports"] == 2
    assert main(["store", "list", "--db", db, "--gdi-weights", "speed=1"]) == 2
    assert "GDI weights" in capsys.readouterr().err
