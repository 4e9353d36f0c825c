"""collect(executor="ray") on a real local Ray runtime: the same trajectories as the thread
executor, environments reused per actor, dead workers retried, bugs propagated; the runtime the
executor starts itself listens on loopback only and runs its workers at the caller's priority."""

import ipaddress
import os
import sys
from pathlib import Path

import pytest

from knowlyrcore import AgentEnv, TimeStep
from knowlyrcore.testing import require_module
from trajectoryhub import collect
from trajectoryhub.ray_executor import LOCAL_RUNTIME_CONFIG, start_local_runtime

ray = require_module("ray", "the Ray executor needs ray: pip install 'knowlyr-hub[ray]' (in [dev])")
require_module("agentsandbox", "the retail suite comes with knowlyr-sandbox")
from agentsandbox.suites import get_suite  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    # this module's classes and functions travel to the workers by value (pytest imports test
    # files under names the workers cannot import)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    start_local_runtime(ray)  # the runtime collect starts when none is running
    yield
    ray.shutdown()


@pytest.fixture
def no_ray_runtime():
    """No Ray running, so the executor starts (and stops) its own; the module's comes back after."""
    ray.shutdown()
    yield
    if not ray.is_initialized():
        start_local_runtime(ray)


def comparable(trajectory):
    """A trajectory without what differs between two recordings of the same episode."""
    data = trajectory.model_dump(mode="json")
    data.pop("id", None)
    for step in data["steps"]:
        step.pop("timestamp", None)
        step.pop("duration_s", None)
    data["metadata"].pop("started_at", None)
    return data


def test_ray_trajectories_equal_the_thread_executor():
    suite = get_suite("retail")
    tasks = suite.generate("test", 6, 0)
    options = dict(
        agent_factory=suite.expert,
        tasks=tasks,
        n_episodes=8,
        max_steps=suite.max_steps,
        env_kwargs=suite.env_kwargs,
        seed=11,
        concurrency=2,
        progress=False,
    )
    threads = collect(suite.env_id, executor="thread", **options)
    on_ray = collect(suite.env_id, executor="ray", **options)
    assert [comparable(t) for t in on_ray] == [comparable(t) for t in threads]
    assert all(t.outcome.success for t in on_ray) and len(on_ray) == 8


class CountingEnv(AgentEnv):
    """Answers every reset with the process id and how many episodes this instance has run."""

    domain = "generic"

    def __init__(self):
        self.episodes = 0

    def reset(self, *, task=None, seed=None):
        self.episodes += 1
        return TimeStep(f"{os.getpid()}:{id(self)}:{self.episodes}:{seed}")

    def step(self, action):
        if action["tool"] == "crash":
            os._exit(1)  # the worker process dies, as on an OOM kill
        if action["tool"] == "bug":
            raise RuntimeError("a bug in the environment")
        return TimeStep("done", reward=1.0, terminated=True, info={"success": True})

    @property
    def available_tools(self):
        return ["finish", "crash", "bug"]


def finish(observation):
    return {"tool": "finish", "params": {}}


def test_each_actor_reuses_one_environment():
    runs = collect(CountingEnv, agent=finish, n_episodes=6, concurrency=2, seed=0, executor="ray", progress=False)
    firsts = [t.metadata["initial_observation"].split(":") for t in runs]  # pid:instance:episodes:seed
    assert len({(pid, instance) for pid, instance, _, _ in firsts}) <= 2  # at most one environment per actor
    assert [int(seed) for *_, seed in firsts] == list(range(6))  # seeds in episode order
    assert max(int(episodes) for _, _, episodes, _ in firsts) >= 3  # an environment ran several episodes


def seeds_of(runs):
    return [int(t.metadata["initial_observation"].split(":")[3]) for t in runs]


class CrashOnce:
    """Kills its worker on episode `target`'s first attempt (a marker file remembers the attempt)."""

    def __init__(self, marker: str, target_seed: int, always: bool = False):
        self.marker, self.target_seed, self.always = marker, target_seed, always

    def reset(self, task=None):
        pass

    def __call__(self, observation):
        seed = int(observation.split(":")[3])
        if seed == self.target_seed and (self.always or not Path(self.marker).exists()):
            Path(self.marker).touch()
            return {"tool": "crash", "params": {}}
        return {"tool": "finish", "params": {}}


def test_a_dead_worker_is_retried_once(tmp_path):
    marker = str(tmp_path / "crashed-once")
    runs = collect(
        CountingEnv,
        agent_factory=lambda: CrashOnce(marker, 2),
        n_episodes=5,
        concurrency=2,
        seed=0,
        executor="ray",
        progress=False,
    )
    assert Path(marker).exists()  # the crash happened
    assert [t.outcome.success for t in runs] == [True] * 5
    assert seeds_of(runs) == [0, 1, 2, 3, 4]


def test_a_worker_that_keeps_dying_is_an_infrastructure_failure(tmp_path):
    marker = str(tmp_path / "crash")
    runs = collect(
        CountingEnv,
        agent_factory=lambda: CrashOnce(marker, 1, always=True),
        n_episodes=4,
        concurrency=2,
        seed=0,
        executor="ray",
        progress=False,
        agent_name="crashy",
    )
    assert [t.outcome.success for t in runs] == [True, False, True, True]
    failed = runs[1]
    assert failed.steps == [] and failed.agent == "crashy"
    assert failed.outcome.exit_status == "infrastructure_failure"
    assert "worker died twice" in failed.metadata["infrastructure_failure"]


def test_a_bug_in_the_episode_propagates():
    def buggy(observation):
        return {"tool": "bug", "params": {}}

    with pytest.raises(RuntimeError, match="a bug in the environment"):
        collect(CountingEnv, agent=buggy, n_episodes=3, concurrency=2, executor="ray", progress=False)


def test_unknown_executor_is_refused():
    with pytest.raises(ValueError, match="executor must be"):
        collect(CountingEnv, agent=finish, executor="dask", progress=False)


def test_cli_collect_on_ray_against_a_real_http_policy(tmp_path):
    from knowlyrcore.testing import ScriptedChatServer
    from trajectoryhub.cli import main

    suite = get_suite("retail")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(__import__("json").dumps(t) + "\n" for t in suite.generate("test", 2, 0)))
    with ScriptedChatServer() as server:
        server.replies += [{"content": "Sorry, I cannot look that up."}] * 2
        code = main(
            [
                "collect",
                suite.env_id,
                "--endpoint",
                server.base_url,
                "--model",
                "m",
                "--tasks",
                str(tasks),
                "-n",
                "2",
                "--concurrency",
                "2",
                "--executor",
                "ray",
                "-o",
                str(tmp_path / "out.jsonl"),
            ]
        )
        assert code == 0 and len(server.requests) == 2
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all('"respond"' in line for line in lines)


def test_evaluate_policy_on_ray_matches_the_batched_run(tmp_path, capsys):
    from trajectoryhub.cli import main
    from trajectoryhub.evaluate import evaluate_policy

    suite = get_suite("retail")
    tasks = suite.generate("test", 5, 3)
    options = dict(env=suite.env_id, env_kwargs=suite.env_kwargs, max_steps=suite.max_steps, seed=0, progress=False)
    batched_summary, batched = evaluate_policy(suite.expert, tasks, **options)
    ray_summary, on_ray = evaluate_policy(suite.expert, tasks, executor="ray", **options)
    assert [comparable(t) for t in on_ray] == [comparable(t) for t in batched]
    assert ray_summary["success_rate"] == batched_summary["success_rate"] == 1.0
    with pytest.raises(ValueError, match="factory of per-episode policies"):
        evaluate_policy(object(), tasks, executor="ray", **options)

    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(__import__("json").dumps(t) + "\n" for t in tasks))
    assert main(["evaluate", "--policy", "expert", "--tasks", str(path), "--executor", "ray"]) == 0
    assert "5 episodes on knowlyr/retail" in capsys.readouterr().err


def listening(process):
    """(process name, address) of every TCP socket listening in ``process`` or its descendants."""
    import psutil

    found = []
    for each in [process, *process.children(recursive=True)]:
        try:
            sockets = each.net_connections(kind="tcp")
            found += [(each.name(), c.laddr.ip) for c in sockets if c.status == "LISTEN"]
        except psutil.NoSuchProcess:  # a worker that exited in between
            continue
    return found


def ray_priorities(process):
    """The niceness of every Ray worker and agent (``ray::…``) among ``process``'s descendants."""
    import psutil

    found = []
    for each in process.children(recursive=True):
        try:
            if each.name().startswith("ray::"):
                found.append(each.nice())
        except psutil.NoSuchProcess:
            continue
    return found


def is_loopback(ip):
    address = ipaddress.ip_address(ip.split("%")[0])
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback  # gRPC's ::ffff:127.0.0.1


def test_the_local_runtime_listens_on_loopback_only_and_runs_workers_at_our_priority(no_ray_runtime):
    """Before: GCS, raylet and workers listened on every interface (::), the runtime-env agent on
    the host's address, for anyone on the network to reach; and the workers ran at niceness 15
    above ours, so any other busy process on the machine starved the episodes."""
    from trajectoryhub.ray_executor import run_on_ray

    psutil = require_module("psutil", "listing the Ray processes' sockets needs psutil: pip install psutil")
    me = psutil.Process()
    seen, priorities = [], []  # sampled after each episode, while the runtime the executor started is up

    def sample():
        seen.extend(listening(me))
        priorities.extend(ray_priorities(me))

    runs = run_on_ray(
        CountingEnv,
        agent=finish,
        agent_factory=None,
        tasks=[None] * 3,
        seeds=[0, 1, 2],
        env_kwargs={},
        options={},
        concurrency=2,
        address=None,
        on_done=sample,
    )
    assert [t.outcome.success for t in runs] == [True] * 3 and not ray.is_initialized()  # started and stopped here
    names = {name for name, _ in seen}
    assert {"gcs_server", "raylet"} <= names and any(name.startswith("ray::") for name in names), names
    assert [(name, ip) for name, ip in seen if not is_loopback(ip)] == []
    assert priorities and set(priorities) == {me.nice()}
    # ray.init adds its session's keys (the spill directory...) to the dict it is given: the next
    # runtime must not get this one's
    assert LOCAL_RUNTIME_CONFIG == {"worker_niceness": 0}


def test_evaluate_on_ray_records_an_env_error_as_a_failed_episode():
    from trajectoryhub.evaluate import evaluate_policy

    def policy():  # the second task's episode makes the environment raise
        return lambda observation: {"tool": "bug" if observation.endswith(":1") else "finish", "params": {}}

    summary, runs = evaluate_policy(
        policy,
        [{"id": f"t{i}"} for i in range(3)],
        env=CountingEnv,
        seed=0,
        executor="ray",
        concurrency=2,
        progress=False,
    )
    assert [t.outcome.success for t in runs] == [True, False, True] and summary["env_errors"] == 1
    assert runs[1].metadata["env_error"] == "RuntimeError: a bug in the environment"
