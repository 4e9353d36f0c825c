from knowlyrcore.wrappers import EpisodeStatisticsWrapper, MaxStepsWrapper

INC = {"tool": "inc", "params": {}}
SUBMIT = {"tool": "submit", "params": {}}


def test_reports_return_length_and_time_at_episode_end(counter_env):
    ticks = iter([0.0, 2.5])
    env = EpisodeStatisticsWrapper(counter_env, clock=lambda: next(ticks))
    env.reset()
    assert "episode" not in env.step(INC).info
    ts = env.step(SUBMIT)
    assert ts.info["episode"]["l"] == 2
    assert abs(ts.info["episode"]["r"] - 0.1) < 1e-12  # 0.1 for inc, 0 for a wrong submit
    assert ts.info["episode"]["t"] == 2.5


def test_queues_keep_the_last_episodes(counter_env):
    env = EpisodeStatisticsWrapper(counter_env, buffer_length=2)
    for n_inc in (0, 1, 2):
        env.reset()
        for _ in range(n_inc):
            env.step(INC)
        env.step(SUBMIT)
    assert env.episode_count == 3
    assert list(env.length_queue) == [2, 3]
    assert list(env.success_queue) == [False, True]


def test_counts_truncated_episodes(counter_env):
    env = EpisodeStatisticsWrapper(MaxStepsWrapper(counter_env, max_steps=2))
    env.reset()
    env.step(INC)
    assert env.step(INC).info["episode"]["l"] == 2
    assert list(env.success_queue) == []
