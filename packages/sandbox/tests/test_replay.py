"""``replay`` on a conversation environment (no backend needed): reproduces, then pinpoints
the step whose observation differs."""

from sandbox_tasks import SUPPORT_TASK

from agentsandbox import replay
from knowlyrcore import make
from knowlyrcore.wrappers import RecorderWrapper

ACTIONS = [
    {"tool": "query_stats", "params": {"query": "A101"}},
    {"tool": "web_search", "params": {"query": "shipping"}},
    {"tool": "respond", "params": {"message": "A101 is processing"}},
]


def _record():
    env = RecorderWrapper(make("knowlyr/conversation"), agent_name="script")
    env.reset(task=SUPPORT_TASK)
    for action in ACTIONS:
        env.step(action)
    return env.get_trajectory()


def test_a_faithful_recording_replays_clean():
    report = replay(_record())
    assert report.ok and report.steps_replayed == 3 and report.env_id == "knowlyr/conversation"


def test_changed_data_is_reported_at_the_step_it_shows():
    trajectory = _record()
    changed = trajectory.model_copy(deep=True)
    changed.task.metadata["records"][1]["status"] = "cancelled"
    report = replay(changed)
    assert [m.index for m in report.mismatches] == [0]
    mismatch = report.mismatches[0]
    assert mismatch.tool == "query_stats" and "processing" in mismatch.recorded and "cancelled" in mismatch.replayed
    assert report.to_dict()["ok"] is False


def test_episode_ending_before_the_recording_does_is_flagged():
    trajectory = _record().model_dump()
    trajectory["steps"].insert(0, {**trajectory["steps"][2], "index": 0})
    for i, step in enumerate(trajectory["steps"]):
        step["index"] = i
    report = replay(trajectory)
    assert report.stopped_early and report.steps_replayed == 1 and not report.ok
