"""Many writer processes on one store, and a writer killed mid-batch: on a real PostgreSQL
server and on SQLite (WAL). No acknowledged trajectory is lost, none is stored twice, and a
batch is all-or-nothing."""

import json
import signal
import subprocess
import sys
import textwrap
import uuid
from collections import Counter

import pytest

from trajectoryhub.store import TrajectoryStore

pytestmark = pytest.mark.integration

# A writer adds `batches` batches of 10: its own trajectories plus 3 shared by every writer,
# and prints each batch's hashes once add() has returned (that is the acknowledgement).
WRITER = textwrap.dedent("""
    import json, sys
    from knowlyrcore import Step, TaskInfo, ToolCall, Trajectory
    from knowlyrcore.trajectory import Observation
    from trajectoryhub.store import TrajectoryStore

    url, writer, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def make(task):
        return Trajectory(task=TaskInfo(id=task, description=task), agent=writer, steps=[
            Step(index=0, tool_call=ToolCall(name="bash", parameters={"command": task}),
                 observation=Observation(output="x" * 2000))])

    with TrajectoryStore(url) as store:
        for b in range(batches):
            items = [make(f"{writer}-b{b}-i{i}") for i in range(7)] + [make(f"shared-b{b % 5}-i{i}") for i in range(3)]
            report = store.add(items)
            print(json.dumps({"batch": b, "hashes": report.hashes}), flush=True)
""")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    return request.getfixturevalue("postgres").fresh_database(f"c_{uuid.uuid4().hex[:12]}")


def start(url, writer, batches):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, writer, str(batches)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrent_writers_lose_nothing_and_store_nothing_twice(url):
    TrajectoryStore(url).close()  # create the schema once, as a deployment would
    writers = [start(url, f"w{k}", 12) for k in range(4)]
    acknowledged: set[str] = set()
    for proc in writers:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        for line in out.splitlines():
            acknowledged |= set(json.loads(line)["hashes"])
    with TrajectoryStore(url) as store:
        stored = [r.trajectory.task.id for r in store.query()]
        assert len(store) == len(acknowledged) == 4 * 12 * 7 + 5 * 3
        assert all(key in store for key in acknowledged)
    assert max(Counter(stored).values()) == 1


def test_a_writer_killed_mid_batch_loses_nothing_acknowledged(url):
    TrajectoryStore(url).close()
    proc = start(url, "victim", 10_000)
    acknowledged: set[str] = set()
    for batches, line in enumerate(proc.stdout, start=1):
        acknowledged |= set(json.loads(line)["hashes"])
        if batches == 25:
            proc.send_signal(signal.SIGKILL)  # while it is writing batch 26 or later
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with TrajectoryStore(url) as store:
        assert all(key in store for key in acknowledged)
        own = [r.trajectory.task.id for r in store.query(agent="victim") if r.trajectory.task.id.startswith("victim-")]
        per_batch = Counter(task.rsplit("-i", 1)[0] for task in own)
    # every batch is all-or-nothing: its 7 own trajectories are stored together or not at all
    assert set(per_batch.values()) == {7}
    assert len(per_batch) >= 25
