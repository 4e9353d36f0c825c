"""Result counts an agent sends to the data-backed search tools go through ``checked_number``.

(``bash``'s timeout and ``read_file``'s line numbers are checked on both real backends by
``SandboxConformance``: ``test_hostile_timeout_is_clamped_and_validated`` and
``test_hostile_line_numbers_are_validated``.)
"""

import json

import pytest

from agentsandbox.conversation import ConversationEnv

HUGE = json.loads("1" + "0" * 400)
TASK = {
    "description": "refunds",
    "knowledge_base": [
        {"title": "refunds", "content": "refund within 14 days"},
        {"title": "refund fees", "content": "none"},
    ],
    "documents": ["refund policy: 14 days", "refund fees: none"],
}


@pytest.mark.parametrize(("tool", "count"), [("knowledge_base", "top_k"), ("web_search", "max_results")])
def test_search_result_counts_are_checked_not_raised(tool, count):
    env = ConversationEnv("advisory")
    env.reset(task=TASK)

    def search(value):
        return env.step({"tool": tool, "params": {"query": "refund", count: value}})

    # JSON Schema's "integer" admits 1.0: it once raised TypeError out of step (slice indices)
    assert search(1.0).info["results"] == 1 and "[2]" not in search(1.0).observation
    assert search(HUGE).info["results"] == 2  # more than there are entries: all of them
    for bad in (0, 1.5, True, "3"):
        ts = search(bad)
        assert ts.observation.startswith("[error]") and ts.info["error"], (bad, ts.observation)
