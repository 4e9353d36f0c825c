"""The trajectory store against hostile input and hostile surroundings, on SQLite and on a real
PostgreSQL server: first writers racing to create the schema, text a database cannot hold,
damaged or foreign store files, and terminal escape sequences in trajectory data."""

import json
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest

from knowlyrcore import AgentEnv, Step, TaskInfo, TimeStep, ToolCall, Trajectory, register, unregister
from knowlyrcore.trajectory import Observation
from trajectoryhub.cli import main
from trajectoryhub.store import _TABLE, StoreError, TrajectoryStore

ESCAPES = "\x1b]0;pwned\x07"  # OSC: retitles the terminal window
CLEAR = "\x1b[2J"  # CSI: clears the screen


def make(task="t", agent="a", output="ok", model=""):
    return Trajectory(
        task=TaskInfo(id=task, description=f"task {task}"),
        agent=agent,
        model=model,
        steps=[
            Step(
                index=0,
                tool_call=ToolCall(name="bash", parameters={"command": "ls"}),
                observation=Observation(output=output),
            )
        ],
    )


def write(path, records):
    """JSONL of trajectories (models) or raw dicts, as json.dumps writes them (\\u escapes)."""
    path.write_text(
        "".join(json.dumps(r if isinstance(r, dict) else r.model_dump(mode="json")) + "\n" for r in records)
    )
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def db(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return request.getfixturevalue("postgres").fresh_database(f"h_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def cli():
    """Start the real command in its own process (what a user runs, tracebacks and all); any
    still running when the test ends (a failed one) is killed."""
    started = []

    def start(*argv):
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "trajectoryhub.cli", *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def count(url):
    with TrajectoryStore(url) as store:
        return len(store)


# --- 9: first writers on a fresh PostgreSQL database -------------------------------------------------------


def six_batches(tmp_path):
    return [write(tmp_path / f"w{k}.jsonl", [make(f"w{k}-{i}") for i in range(50)]) for k in range(6)]


def finish(procs):
    results = [proc.communicate(timeout=300) for proc in procs]
    return [(proc.returncode, err) for proc, (_, err) in zip(procs, results)]


@pytest.mark.integration
def test_six_first_writers_on_a_fresh_postgres_database_all_succeed(postgres, cli, tmp_path):
    # one fresh database: the race itself is made certain by the next test
    url = postgres.fresh_database(f"race_{uuid.uuid4().hex[:8]}")
    procs = [cli("store", "add", str(batch), "--db", url) for batch in six_batches(tmp_path)]
    results = finish(procs)
    assert [code for code, _ in results] == [0] * 6, [err for _, err in results]
    assert count(url) == 6 * 50


@pytest.mark.integration
def test_first_writers_wait_out_another_schema_creator(postgres, cli, tmp_path):
    """The race made certain: another session has created the table but not committed yet when
    the six writers arrive, and commits once all six wait on it. Each writer's CREATE TABLE then
    collides with the committed table (UniqueViolation on pg_type): it must retry, not die."""
    import psycopg

    url = postgres.fresh_database(f"creator_{uuid.uuid4().hex[:8]}")
    batches = six_batches(tmp_path)
    with psycopg.connect(url) as creator, psycopg.connect(url, autocommit=True) as watcher:
        creator.execute(_TABLE)  # in a transaction left open
        procs = [cli("store", "add", str(batch), "--db", url) for batch in batches]
        waiting, give_up = 0, time.monotonic() + 600  # a bound against a hang, not a timing assumption
        while waiting < 6 and all(proc.poll() is None for proc in procs) and time.monotonic() < give_up:
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> %s "
                "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'",
                (creator.info.backend_pid,),
            ).fetchone()[0]
        creator.commit()
    results = finish(procs)
    assert [code for code, _ in results] == [0] * 6, [err for _, err in results]
    assert count(url) == 6 * 50


# --- 10: text a database cannot hold -------------------------------------------------------------------------


def one_line_error(code, err, *expected):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for part in expected:
        assert part in err, err


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("agent", "a\x00b", "NUL character"),
        ("task.id", "t\x00", "NUL character"),
        ("model", "m\x00", "NUL character"),
        ("agent", "x\ud800y", "lone UTF-16 surrogate"),
        ("steps[0].observation.output", "\udc80 out", "lone UTF-16 surrogate"),
    ],
    ids=["nul-agent", "nul-task-id", "nul-model", "surrogate-agent", "surrogate-output"],
)
def test_text_no_database_can_hold_is_refused_by_file_line_and_field(db, tmp_path, capsys, field, value, problem):
    bad = make("bad").model_dump(mode="json")
    if field == "task.id":
        bad["task"]["id"] = value
    elif field.startswith("steps"):
        bad["steps"][0]["observation"]["output"] = value
    else:
        bad[field] = value
    runs = write(tmp_path / "runs.jsonl", [make("good-1"), make("good-2"), bad])
    code = main(["store", "add", str(runs), "--db", db])
    one_line_error(code, capsys.readouterr().err, f"error: {runs}:3: {field}: ", problem)
    assert count(db) == 0  # as for any other bad line: nothing of the command is stored
    # the library refuses the same trajectory the same way, before it writes anything
    with TrajectoryStore(db) as store, pytest.raises(StoreError, match=rf"trajectory 2 of the batch: .*{problem}"):
        store.add([make("good-1"), Trajectory.model_validate(bad)])
    assert count(db) == 0


def test_nul_inside_the_recorded_json_round_trips(db):
    """A NUL in tool output lives only in the trajectory's JSON (escaped there): both engines keep it."""
    with TrajectoryStore(db) as store:
        report = store.add(make(output="bin\x00ary"))
        assert store.get(report.hashes[0]).steps[0].observation.output == "bin\x00ary"


# --- 11: damaged and foreign store files -----------------------------------------------------------------------


def sqlite_store(tmp_path, name):
    path = tmp_path / name
    with TrajectoryStore(path) as store:
        store.add([make(f"t{i}", output="x" * 500) for i in range(200)])
    return path


def garbage_after_header(tmp_path):
    path = sqlite_store(tmp_path, "garbage.db")
    data = bytearray(path.read_bytes())
    data[4096:] = bytes((i * 131 + 7) % 256 for i in range(len(data) - 4096))  # page 1 (header, schema) kept
    path.write_bytes(bytes(data))
    return path


def garbage_table_pages(tmp_path):
    path = sqlite_store(tmp_path, "pages.db")
    data = bytearray(path.read_bytes())
    data[-20 * 4096 :] = b"\x5a" * (20 * 4096)  # the last pages: rows and index entries
    path.write_bytes(bytes(data))
    return path


def foreign_table(tmp_path):
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE trajectories (name TEXT, size INTEGER)")
        conn.execute("INSERT INTO trajectories VALUES ('x', 1)")
    conn.close()
    return path


@pytest.mark.parametrize("damage", [garbage_after_header, garbage_table_pages, foreign_table])
@pytest.mark.parametrize("command", ["list", "stats", "add"])
def test_a_damaged_or_foreign_sqlite_store_is_one_line_naming_the_file(tmp_path, capsys, damage, command):
    path = damage(tmp_path)
    runs = write(tmp_path / "runs.jsonl", [make("new")])
    argv = ["store", command, "--db", str(path), *([str(runs)] if command == "add" else [])]
    before = path.read_bytes() if damage is not foreign_table else None
    code = main(argv)
    expected = (
        "its table 'trajectories' is not a trajectory store's (no column agent"
        if damage is foreign_table
        else "not a usable SQLite database (database disk image is malformed)"
    )
    one_line_error(code, capsys.readouterr().err, f"error: {path}: {expected}")
    if damage is foreign_table:  # left as it was: no index added, no row
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT * FROM trajectories").fetchall() == [("x", 1)]
            assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("trajectories",)]
        conn.close()
    else:
        assert path.read_bytes() == before  # refused, not repaired or written over


def test_a_damaged_record_is_one_line_naming_the_file_and_the_row(tmp_path, capsys):
    path = sqlite_store(tmp_path, "record.db")
    with sqlite3.connect(path) as conn:
        (key,) = conn.execute("SELECT hash FROM trajectories ORDER BY hash LIMIT 1").fetchone()
        conn.execute("UPDATE trajectories SET record = '{\"task\": 3}' WHERE hash = ?", (key,))
    conn.close()
    code = main(["store", "list", "--db", str(path)])
    one_line_error(code, capsys.readouterr().err, f"error: {path}: stored trajectory {key[:12]} is damaged")


@pytest.mark.integration
@pytest.mark.parametrize("command", ["list", "stats", "add"])
def test_a_foreign_postgres_table_is_one_line(postgres, tmp_path, capsys, command):
    import psycopg

    url = postgres.fresh_database(f"foreign_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE trajectories (name TEXT, size INTEGER)")
    runs = write(tmp_path / "runs.jsonl", [make("new")])
    code = main(["store", command, "--db", url, *([str(runs)] if command == "add" else [])])
    one_line_error(code, capsys.readouterr().err, "is not a trajectory store's (no column agent")


# --- 12: terminal escape sequences in trajectory data ---------------------------------------------------------


def assert_escaped(out):
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "\\x1b]0;pwned\\x07" in out and "\\x1b[2J" in out, out


def test_store_listings_escape_control_characters(db, tmp_path, capsys):
    runs = write(tmp_path / "evil.jsonl", [make(CLEAR, agent=ESCAPES), make("t\x9b2J", agent="\x7f", output="2")])
    assert main(["store", "add", str(runs), "--db", db]) == 0
    capsys.readouterr()
    assert main(["store", "list", "--db", db]) == 0
    out = capsys.readouterr().out
    assert_escaped(out)
    assert "t\\x9b2J" in out and "\\x7f" in out and "\x9b" not in out and "\x7f" not in out
    assert main(["store", "stats", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and json.loads(out)["by_agent"][ESCAPES] == 1


def test_compare_escapes_agent_names(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", [make(f"x{i}", agent=ESCAPES, output=str(i)) for i in range(3)])
    b = write(tmp_path / "b.jsonl", [make(f"x{i}", agent=CLEAR, output=f"b{i}") for i in range(3)])
    for path in (a, b):
        path.write_text(path.read_text().replace('"reward": null', '"reward": 0.5'))
    assert main(["compare", "-t", str(a), "-t", str(b)]) == 0
    assert_escaped(capsys.readouterr().out)


class Respond(AgentEnv):
    """One tool; answering ends the episode successfully."""

    domain = "hubtest"

    def reset(self, *, task=None, seed=None):
        return TimeStep("say something")

    def step(self, action):
        return TimeStep("bye", reward=1.0, terminated=True, info={"success": True})

    @property
    def available_tools(self):
        return ["respond"]


def test_evaluate_table_escapes_the_stage_name(tmp_path, capsys):
    register("hubtest/respond-v0", Respond)
    try:
        task = {
            "id": "r",
            "description": "answer",
            "domain": "hubtest",
            "metadata": {"solution": [{"tool": "respond", "params": {}}]},
        }
        tasks = write(tmp_path / "tasks.jsonl", [task])
        argv = [
            "evaluate",
            "--policy",
            "expert",
            "--tasks",
            str(tasks),
            "--env",
            "hubtest/respond-v0",
            "--name",
            ESCAPES + CLEAR,
        ]
        assert main(argv) == 0
    finally:
        unregister("hubtest/respond-v0")
    assert_escaped(capsys.readouterr().out)
