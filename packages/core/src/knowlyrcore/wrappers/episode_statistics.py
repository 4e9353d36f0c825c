"""``EpisodeStatisticsWrapper``: return, length and duration of every episode."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from knowlyrcore.env import AgentEnv, EnvWrapper
from knowlyrcore.timestep import TimeStep


class EpisodeStatisticsWrapper(EnvWrapper):
    """At the end of an episode puts ``info["episode"] = {"r": return, "l": length, "t": seconds}``.

    The last ``buffer_length`` episodes' returns and lengths are kept in ``return_queue`` and
    ``length_queue`` (as in Gymnasium's ``RecordEpisodeStatistics``), plus ``success_queue``
    from ``info["success"]`` when the environment reports it.
    """

    def __init__(self, env: AgentEnv, buffer_length: int = 100, *, clock: Callable[[], float] = time.perf_counter):
        super().__init__(env)
        self.return_queue: deque[float] = deque(maxlen=buffer_length)
        self.length_queue: deque[int] = deque(maxlen=buffer_length)
        self.success_queue: deque[bool] = deque(maxlen=buffer_length)
        self.episode_count = 0
        self._clock = clock
        self._return = 0.0
        self._length = 0
        self._start = 0.0

    def reset(self, *, task=None, seed=None) -> TimeStep:
        ts = self.env.reset(task=task, seed=seed)
        self._return, self._length, self._start = 0.0, 0, self._clock()
        return ts

    def step(self, action) -> TimeStep:
        ts = self.env.step(action)
        self._return += ts.reward
        self._length += 1
        if ts.done:
            stats = {"r": self._return, "l": self._length, "t": round(self._clock() - self._start, 6)}
            ts.info["episode"] = stats
            self.return_queue.append(self._return)
            self.length_queue.append(self._length)
            if "success" in ts.info:
                self.success_queue.append(bool(ts.info["success"]))
            self.episode_count += 1
        return ts
