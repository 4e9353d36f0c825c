"""TrajectoryStore on SQLite and on a real PostgreSQL server: one API, the same results."""

import json
import math
import sqlite3
import uuid

import pytest

from knowlyrcore import Outcome, Step, TaskInfo, ToolCall, Trajectory
from knowlyrcore.testing import require_module
from knowlyrcore.trajectory import Observation
from trajectoryhub.cli import main
from trajectoryhub.dedup import content_hash
from trajectoryhub.store import GDIWeights, NoStoreError, StoreError, TrajectoryStore, gdi_score

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
    store.add(
        [
            make("t1", 0.9, True, "alice"),
            make("t2", 0.2, False, "bob", domain="retail"),
            make("t3", None, None, "alice", output="x"),
        ],
        now=NOW,
    )
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
    for bad in (
        {"intrinsic": -1},
        {"utility": float("nan")},
        {"intrinsic": 0, "utility": 0, "feedback": 0, "freshness": 0},
    ):
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
    assert {r.trajectory.task.id: r.exports for r in store.query()} == {
        "t5": 1,
        "t4": 2,
        "t3": 1,
        "t2": 1,
        "t1": 0,
        "t0": 1,
    }
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


# --- issue #43: the hash `store list` prints names a trajectory; only `store add` makes a store ----------------


def one_line_error(code, err, *expected):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for part in expected:
        assert part in err, err


def rehash(store, old, new):
    """Give a stored row a chosen hash: sha256 prefixes shared by two trajectories are too rare to
    make by search."""
    with store._transaction() as cur:
        cur.execute("UPDATE trajectories SET hash = ? WHERE hash = ?", (new, old))


def test_a_unique_prefix_of_a_hash_names_the_trajectory(store):
    a, b, c = make("a", output="1"), make("b", output="2"), make("c", output="3")
    full = content_hash(a)
    store.add([a, b, c])
    assert store.resolve(full) == full and store.resolve(full[:12]) == full and store.resolve(full[:8]) == full
    assert store.resolve(full[:12].upper()) == full
    assert store.get(full[:12]).task.id == "a"
    assert store.mark_feedback(full[:12], 0.9) == full
    assert {r.trajectory.task.id: r.feedback for r in store.query()} == {"a": 0.9, "b": 0.5, "c": 0.5}
    # two stored hashes sharing their first 8 digits (and a third sharing 7 of them)
    rehash(store, content_hash(b), "abcdef01" + "0" * 56)
    rehash(store, content_hash(c), "abcdef01" + "1" * 56)
    rehash(store, full, "abcdef02" + "2" * 56)
    with pytest.raises(StoreError, match=r"^hash 'abcdef01' is ambiguous: 2 stored trajectories start with it"):
        store.resolve("abcdef01")
    with pytest.raises(StoreError, match="is ambiguous: 2 stored"):
        store.mark_feedback("abcdef01", 0.1)
    assert store.get("abcdef011").task.id == "c" and store.resolve("abcdef02") == "abcdef02" + "2" * 56
    with pytest.raises(StoreError, match=r"^no trajectory with hash 'abcdef03' in the store$"):
        store.resolve("abcdef03")
    # too short, or not hex (SQL pattern characters among them): not a hash at all
    for bad in ("abcdef0", "abcdef0%", "abcdef0_", "abcdef0*", "abcdefgh", "", "a" * 65):
        with pytest.raises(
            StoreError, match=r"is not a trajectory hash: give its 64 hex digits or at least its first 8"
        ):
            store.resolve(bad)
    assert [r.feedback for r in store.query(order_by="time")].count(0.5) == 2  # nothing else was rated


def test_cli_feedback_takes_the_hash_store_list_prints(store, tmp_path, capsys):
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(make(f"t{i}", i / 4, True, output=str(i)).model_dump_json() + "\n" for i in range(3)))
    assert main(["store", "add", str(runs), "--db", store.url]) == 0
    capsys.readouterr()
    assert main(["store", "list", "--db", store.url, "--order", "reward"]) == 0
    listed = {line.split()[-1]: line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]}
    assert sorted(listed) == ["t0", "t1", "t2"] and all(len(h) == 12 for h in listed.values())
    assert main(["store", "feedback", listed["t1"], "0.9", "--db", store.url]) == 0
    assert capsys.readouterr().err == f"feedback 0.9 -> {listed['t1']}\n"
    assert {r.trajectory.task.id: r.feedback for r in store.query()} == {"t0": 0.5, "t1": 0.9, "t2": 0.5}
    assert main(["store", "feedback", content_hash(make("t2", output="2")), "0.1", "--db", store.url]) == 0
    capsys.readouterr()
    assert main(["store", "feedback", "0123", "0.1", "--db", store.url]) == 2
    one_line_error(2, capsys.readouterr().err, "error: '0123' is not a trajectory hash")
    missing = next(p for p in ("00000000", "ffffffff") if not any(h.startswith(p) for h in listed.values()))
    assert main(["store", "feedback", missing, "0.1", "--db", store.url]) == 2
    one_line_error(2, capsys.readouterr().err, f"error: no trajectory with hash '{missing}' in the store")
    rehash(store, content_hash(make("t0", 0.0, True, output="0")), "abcdef01" + "0" * 56)
    rehash(store, content_hash(make("t2", output="2")), "abcdef01" + "1" * 56)
    assert main(["store", "feedback", "abcdef01", "0.1", "--db", store.url]) == 2
    one_line_error(2, capsys.readouterr().err, "error: hash 'abcdef01' is ambiguous: 2 stored trajectories")
    assert {r.feedback for r in store.query()} == {0.5, 0.9, 0.1}  # the refused ones changed nothing


@pytest.fixture
def no_env_store(monkeypatch, tmp_path):
    monkeypatch.delenv("KNOWLYR_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


READS = {
    "list": ["store", "list"],
    "export": ["store", "export", "--order", "gdi", "--limit", "500", "-o", "top.parquet"],
    "export-jsonl": ["store", "export", "-o", "top.jsonl"],
    "stats": ["store", "stats"],
    "feedback": ["store", "feedback", "0123456789ab", "0.9"],
}


@pytest.mark.parametrize("command", sorted(READS))
def test_reading_a_store_that_is_not_there_is_one_line_and_makes_no_file(no_env_store, capsys, command):
    # the README's sequence: the store was added with --db store.db, the next command forgot --db
    runs = no_env_store / "runs.jsonl"
    runs.write_text(make("t", 0.9, True).model_dump_json() + "\n")
    assert main(["store", "add", "runs.jsonl", "--db", "store.db"]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in no_env_store.iterdir())
    one_line_error(
        main(READS[command]),
        capsys.readouterr().err,
        "error: trajectories.db: no trajectory store there (no such file); pass --db",
        "or run `knowlyr-hub store add FILE --db trajectories.db` first",
    )
    assert sorted(p.name for p in no_env_store.iterdir()) == before  # no trajectories.db, no output file
    one_line_error(main([*READS[command], "--db", "sub/x.db"]), capsys.readouterr().err, "sub/x.db: no trajectory")
    assert sorted(p.name for p in no_env_store.iterdir()) == before  # not even the folder
    assert main([*READS[command], "--db", "store.db"]) in (0, 2)  # the store that is there answers
    if command != "feedback":  # (feedback: that hash is not in it)
        assert "no trajectory store" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["list", "stats", "feedback"])
def test_an_sqlite_file_without_a_store_is_refused_and_left_as_it_was(no_env_store, capsys, command):
    empty = no_env_store / "empty.db"
    empty.write_bytes(b"")
    other = no_env_store / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()
    for path in (empty, other):
        before = path.read_bytes()
        one_line_error(
            main([*READS[command], "--db", str(path)]),
            capsys.readouterr().err,
            f"error: {path}: no trajectory store there (no table 'trajectories': nothing was ever added to it)",
        )
        assert path.read_bytes() == before
    assert sorted(p.name for p in no_env_store.iterdir()) == ["empty.db", "other.db"]  # no -wal, no -shm


def test_the_library_opens_without_creating_only_when_asked(tmp_path):
    with pytest.raises(NoStoreError, match=r"new\.db: no trajectory store there \(no such file\)"):
        TrajectoryStore(tmp_path / "new.db", create=False)
    assert not (tmp_path / "new.db").exists()
    with TrajectoryStore(tmp_path / "new.db") as store:  # the default makes it
        store.add(make())
    with TrajectoryStore(tmp_path / "new.db", create=False) as store:
        assert len(store) == 1


@pytest.mark.parametrize("command", ["list", "export", "stats", "feedback"])
def test_reading_a_postgres_database_without_a_store_is_one_line_and_creates_no_table(
    postgres, no_env_store, capsys, command
):
    import psycopg

    url = postgres.fresh_database(f"empty_{uuid.uuid4().hex[:8]}")
    name = url.rpartition("/")[2]
    one_line_error(
        main([*READS[command], "--db", url]),
        capsys.readouterr().err,
        f"/{name}: no trajectory store there (no table 'trajectories'",
        f"run `knowlyr-hub store add FILE --db {url}` first",
    )
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT to_regclass('trajectories')").fetchone() == (None,)
    assert list(no_env_store.iterdir()) == []  # no export written
