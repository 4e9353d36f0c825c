"""The group-relative judge (``agentreward.relative``).

* Over ``knowlyrcore.testing.ScriptedChatServer`` (a real loopback HTTP server replying from a
  script): the prompt it receives, scores mapped back through the shuffle to the trajectories they
  were given to, the two-order average, and every unusable reply (no JSON, wrong length, NaN,
  out of range, a boolean, a string) ending in an abstention for the whole group, counted.
* Against a real served model (``knowlyr-trainer serve`` on a tiny random model) on groups
  recorded by playing the retail suite (its expert and the expert with one kind of mistake),
  written to JSONL and read back: a model that answers garbage still leaves every call with G
  valid scores or a counted abstention, never an exception.

    pytest packages/reward/tests/test_relative_judge.py
"""

from __future__ import annotations

import doctest
import math
import re

import pytest

import agentreward.relative
from agentreward import Judge
from agentreward.relative import GROUP_SYSTEM_PROMPT, RUBRIC_SYSTEM_PROMPT, RelativeJudge, transcript
from agentreward.trajectories import read_trajectory_dicts
from knowlyrcore.testing import ScriptedChatServer, require_module

require_module("openai", "the judge needs the openai SDK (knowlyr-reward[llm])")

TASK = "Cancel order #W7 for Ada."
RUBRIC = "Looks the order up, cancels exactly #W7, and says so in the final answer."


def attempt(answer: str, *calls: tuple[str, dict, str]) -> dict:
    """A trajectory record: ``calls`` (tool, parameters, observation), then ``respond(answer)``."""
    steps = [
        {"tool_call": {"name": name, "parameters": params}, "observation": {"output": output}}
        for name, params, output in calls
    ]
    steps.append({"tool_call": {"name": "respond", "parameters": {"message": answer}}, "observation": {"output": ""}})
    return {"task": {"description": TASK}, "steps": steps, "outcome": {"success": answer.startswith("Cancelled")}}


GROUP = [
    attempt("Cancelled #W7.", ("get_order", {"id": "#W7"}, "pending"), ("cancel_order", {"id": "#W7"}, "cancelled")),
    attempt("Sorry, I cannot help with that."),
    attempt("Cancelled #W8.", ("cancel_order", {"id": "#W8"}, "cancelled")),
    attempt("Cancelled #W7.", ("get_order", {"id": "#W7"}, "pending")),
]


@pytest.fixture
def server():
    with ScriptedChatServer() as server:
        yield server


def judge_at(server, **options) -> Judge:
    return Judge(model="judge-m", base_url=server.base_url, **options)


def reply(text: str) -> dict:
    return {"content": text}


def shown(request: dict) -> list[int]:
    """Which trajectory of ``GROUP`` the judge was shown at each position, read off the prompt."""
    prompt = request["body"]["messages"][1]["content"]
    sections = re.split(r"^TRAJECTORY \d+:\n", prompt, flags=re.MULTILINE)[1:]
    texts = [transcript(t) for t in GROUP]
    return [texts.index(section.split("\n\n")[0]) for section in sections]


def test_scores_map_back_through_the_shuffle_to_the_trajectories(server):
    server.replies.append(reply('{"scores": [0.1, 0.4, 0.7, 1.0]}'))
    judge = judge_at(server)
    scores = RelativeJudge(judge).score_group(TASK, RUBRIC, GROUP)
    order = shown(server.requests[0])
    assert sorted(order) == [0, 1, 2, 3]
    # position p held GROUP[order[p]]: that trajectory gets the p-th score of the reply
    expected = [0.0] * 4
    for position, score in enumerate([0.1, 0.4, 0.7, 1.0]):
        expected[order[position]] = score
    assert scores == expected
    assert judge.calls == 1 and judge.failures == []
    # the shown order is a seeded permutation: the same for the same seed, not always the identity
    orders = {
        tuple(RelativeJudge(judge, seed=s).shown_order([transcript(t) for t in GROUP], TASK, RUBRIC)) for s in range(8)
    }
    assert len(orders) > 1
    assert RelativeJudge(judge, seed=3).shown_order(["a", "b", "c"], TASK, RUBRIC) == RelativeJudge(
        judge, seed=3
    ).shown_order(["a", "b", "c"], TASK, RUBRIC)


def test_the_prompt_holds_the_rubric_and_each_trajectory_clipped_without_the_envs_verdict(server):
    server.replies.append(reply('{"scores": [1, 1, 1, 1]}'))
    long_output = "x" * 5000
    group = [*GROUP[:3], attempt("Cancelled #W7.", ("get_order", {"id": "#W7"}, long_output))]
    RelativeJudge(judge_at(server), observation_chars=100).score_group(TASK, RUBRIC, group)
    body = server.requests[0]["body"]
    system, prompt = body["messages"][0]["content"], body["messages"][1]["content"]
    assert system == GROUP_SYSTEM_PROMPT and body["model"] == "judge-m" and body["temperature"] == 0
    assert prompt.startswith(f"TASK: {TASK}\n\nRUBRIC: {RUBRIC}\n\nTRAJECTORY 1:\n")
    assert prompt.endswith(
        'Score the 4 trajectories: {"scores": [<trajectory 1>, <trajectory 2>, <trajectory 3>, <trajectory 4>]}'
    )
    assert "x" * 60 not in prompt and "x" * 50 in prompt  # 100 characters: the first and last 50
    assert "FINAL ANSWER: Sorry, I cannot help with that." in prompt
    assert "success" not in prompt.lower()


def test_scores_by_trajectory_number_are_read_as_the_list(server):
    server.replies.append(reply('Here: {"scores": {"4": 0.0, "2": 0.5, "1": 1, "3": 0.25}}'))
    scores = RelativeJudge(judge_at(server)).score_group(TASK, RUBRIC, GROUP)
    order = shown(server.requests[0])
    by_position = [1.0, 0.5, 0.25, 0.0]
    assert scores == [by_position[order.index(i)] for i in range(4)]


def test_two_orders_average_each_trajectorys_scores_the_second_order_reversed(server):
    server.replies += [reply('{"scores": [0.0, 0.2, 0.4, 0.6]}'), reply('{"scores": [1.0, 0.8, 0.6, 0.4]}')]
    judge = judge_at(server)
    scores = RelativeJudge(judge, orders=2).score_group(TASK, RUBRIC, GROUP)
    first, second = shown(server.requests[0]), shown(server.requests[1])
    assert second == first[::-1]
    # GROUP[first[p]] was at position p, then at position 3 - p: mean of reply1[p] and reply2[3 - p]
    reply1, reply2 = [0.0, 0.2, 0.4, 0.6], [1.0, 0.8, 0.6, 0.4]
    expected = [0.0] * 4
    for p in range(4):
        expected[first[p]] = (reply1[p] + reply2[3 - p]) / 2
    assert scores == pytest.approx(expected) and judge.calls == 2


def test_when_one_order_abstains_the_other_orders_scores_stand(server):
    server.replies += [reply("no idea"), reply('{"scores": [0.3, 0.3, 0.9, 0.9]}')]
    judge = judge_at(server, max_retries=0)
    scores = RelativeJudge(judge, orders=2).score_group(TASK, RUBRIC, GROUP)
    second = shown(server.requests[1])
    assert [scores[i] for i in second] == [0.3, 0.3, 0.9, 0.9]
    assert len(judge.failures) == 1 and judge.failures[0].startswith("group of 4 (Cancel order #W7")


UNUSABLE = {
    "no JSON": "Trajectory 1 is best.",
    "too few": '{"scores": [0.5, 0.5, 0.5]}',
    "too many": '{"scores": [0.5, 0.5, 0.5, 0.5, 0.5]}',
    "NaN": '{"scores": [0.5, NaN, 0.5, 0.5]}',
    "Infinity": '{"scores": [0.5, Infinity, 0.5, 0.5]}',
    "above 1": '{"scores": [0.5, 1.5, 0.5, 0.5]}',
    "a 0-10 scale": '{"scores": [5, 7, 2, 9]}',
    "below 0": '{"scores": [0.5, -0.1, 0.5, 0.5]}',
    "a boolean": '{"scores": [true, 0.5, 0.5, 0.5]}',
    "a string": '{"scores": ["0.5", 0.5, 0.5, 0.5]}',
    "a nested list": '{"scores": [[0.5], 0.5, 0.5, 0.5]}',
    "wrong numbers": '{"scores": {"0": 0.5, "1": 0.5, "2": 0.5, "3": 0.5}}',
    "a huge integer": '{"scores": [' + "9" * 5000 + ", 0.5, 0.5, 0.5]}",
    "broken JSON": '{"scores": [0.5, 0.5, 0.5, 0.5,]}',
}


@pytest.mark.parametrize("text", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_an_unusable_reply_makes_the_whole_group_abstain_counted(server, text):
    server.replies += [reply(text)] * 2
    judge = judge_at(server, max_retries=1)
    assert RelativeJudge(judge).score_group(TASK, RUBRIC, GROUP) == [None] * 4
    assert judge.calls == 2 and len(judge.failures) == 1
    assert judge.failures[0].startswith("group of 4 (")
    # the retry samples: greedy decoding would give the same reply again
    assert [r["body"]["temperature"] for r in server.requests] == [0, judge.retry_temperature]


def test_a_retry_after_an_unusable_reply_scores_the_group(server):
    server.replies += [reply('{"scores": [0.5, NaN, 0.5, 0.5]}'), reply('{"scores": [1, 1, 0, 0]}')]
    judge = judge_at(server, max_retries=1)
    scores = RelativeJudge(judge).score_group(TASK, RUBRIC, GROUP)
    assert sorted(scores) == [0.0, 0.0, 1.0, 1.0] and judge.failures == []


def test_an_endpoint_error_abstains_and_the_run_deadline_stops_asking(server):
    judge = judge_at(server, max_retries=1)  # no scripted reply: HTTP 500 twice
    assert RelativeJudge(judge).score_group(TASK, RUBRIC, GROUP) == [None] * 4
    assert judge.calls == 2 and "500" in judge.failures[0]
    late = judge_at(server, run_deadline=0.0)
    assert RelativeJudge(late, orders=2).score_group(TASK, RUBRIC, GROUP) == [None] * 4
    assert late.calls == 0 and len(server.requests) == 2
    assert all("run deadline" in failure for failure in late.failures) and len(late.failures) == 2


def test_one_trajectory_and_an_empty_group(server):
    server.replies.append(reply('{"scores": [0.8]}'))
    judge = judge_at(server)
    assert RelativeJudge(judge, orders=2).score_group(TASK, RUBRIC, GROUP[:1]) == [0.8]
    assert RelativeJudge(judge).score_group(TASK, RUBRIC, []) == []
    assert judge.calls == 1  # one trajectory has one order


def test_rubric_scoring_of_one_trajectory(server):
    server.replies += [reply('It meets the rubric. {"score": 0.75}'), reply('{"score": 3}'), reply('{"score": NaN}')]
    judge = judge_at(server, max_retries=0)
    relative = RelativeJudge(judge)
    assert relative.score_rubric(TASK, RUBRIC, GROUP[0]) == 0.75
    body = server.requests[0]["body"]
    assert body["messages"][0]["content"] == RUBRIC_SYSTEM_PROMPT
    assert f"RUBRIC: {RUBRIC}" in body["messages"][1]["content"]
    assert "TRAJECTORY:\n[0] get_order" in body["messages"][1]["content"]
    assert relative.score_rubric(TASK, RUBRIC, GROUP[1]) is None
    assert relative.score_rubric(TASK, RUBRIC, GROUP[2]) is None
    assert len(judge.failures) == 2 and judge.failures[0].startswith("rubric (")


def test_long_trajectories_show_their_first_and_last_steps():
    calls = [("get_order", {"id": f"#W{i}"}, f"order {i}") for i in range(30)]
    text = transcript(attempt("done", *calls), steps_shown=6)
    assert [line.split("(")[0] for line in text.splitlines()] == [
        "[0] get_order",
        "[1] get_order",
        "[2] get_order",
        "... ",
        "[27] get_order",
        "[28] get_order",
        "[29] get_order",
        "FINAL ANSWER: done",
    ]
    assert "... (24 steps not shown) ..." in text
    cut = transcript({"steps": GROUP[0]["steps"][:1]})
    assert cut.endswith("FINAL ANSWER: (none: the episode ended without one)")


def test_settings_it_cannot_work_with_are_refused():
    with pytest.raises(ValueError, match="orders must be 1 or 2"):
        RelativeJudge(Judge(model="m"), orders=3)
    with pytest.raises(ValueError, match="verdict='text'"):
        RelativeJudge(Judge(model="m", verdict="logprobs"))


def test_doctests():
    result = doctest.testmod(agentreward.relative)
    assert result.attempted >= 4 and result.failed == 0


# -- a real served model, recorded groups ----------------------------------------------------------


def record_groups(path) -> None:
    """Play retail test tasks with the expert and each corrupted expert; the tasks get a rubric."""
    suites = require_module("agentsandbox.suites", "the retail suite comes with knowlyr-sandbox")
    require_module("trajectoryhub", "the batched collector comes with knowlyr-hub")
    from knowlyrcore import write_trajectories
    from trajectoryhub.corrupted import expert_and_corrupted_runs

    suite = suites.get_suite("retail")
    tasks = suite.generate("test", 3, 11)
    for task in tasks:
        task["metadata"]["rubric"] = (
            "Follows the store's policy: looks up what the request is about, changes exactly what the user asked "
            "for and nothing else, and the final answer truthfully says what was done."
        )
    runs = expert_and_corrupted_runs(suite, tasks, seed=5)
    write_trajectories(path, runs)


@pytest.fixture(scope="module")
def served_tiny(tmp_path_factory):
    require_module("agenttrainer", "the served model is knowlyr-trainer's `serve`")
    from agenttrainer.models import build_tiny_model, save_model
    from agenttrainer.serving.background import ServerProcess

    model, tokenizer = build_tiny_model(seed=0)
    checkpoint = save_model(model, tokenizer, tmp_path_factory.mktemp("judge") / "tiny")
    with ServerProcess(str(checkpoint), "--model-name", "tiny-judge", "--max-tokens", "48") as server:
        yield server


@pytest.mark.integration  # a knowlyr-trainer serve process on loopback, retail episodes
def test_a_served_model_leaves_every_recorded_group_scored_or_abstaining(served_tiny, tmp_path):
    path = tmp_path / "groups.jsonl"
    record_groups(path)
    groups: dict[str, list[dict]] = {}
    for record in read_trajectory_dicts(path):
        groups.setdefault(record["task"]["id"], []).append(record)
    assert len(groups) == 3 and all(len(group) == 5 for group in groups.values())
    assert any(r["outcome"]["success"] for g in groups.values() for r in g)
    assert not all(r["outcome"]["success"] for g in groups.values() for r in g)

    judge = Judge(model="tiny-judge", base_url=served_tiny.base_url, max_tokens=48, max_retries=1, call_deadline=60.0)
    relative = RelativeJudge(judge, orders=2, observation_chars=120)
    for group in groups.values():
        task = group[0]["task"]
        failures = len(judge.failures)
        scores = relative.score_group(task["description"], task["metadata"]["rubric"], group)
        assert len(scores) == len(group)
        if scores[0] is None:  # abstained: the whole group, once per order, each counted with its reason
            assert scores == [None] * len(group) and len(judge.failures) == failures + 2
        else:
            assert all(isinstance(s, float) and 0.0 <= s <= 1.0 and math.isfinite(s) for s in scores)
        assert all(f.startswith("group of 5 (") for f in judge.failures[failures:])
        rubric = relative.score_rubric(task["description"], task["metadata"]["rubric"], group[0])
        assert rubric is None or 0.0 <= rubric <= 1.0
    # the model was asked (never more than retries allow), and its answers were read, not trusted
    assert 0 < judge.calls <= len(groups) * 3 * (judge.max_retries + 1)

    # every recorded trajectory at once, observations unclipped: past the tiny model's 2048-token
    # context, the server's refusal is one more counted abstention
    everything = [r for group in groups.values() for r in group]
    wide = RelativeJudge(judge, observation_chars=4000)
    before = len(judge.failures)
    assert wide.score_group(TASK, RUBRIC, everything) == [None] * len(everything)
    assert len(judge.failures) == before + 1 and "context" in judge.failures[-1]
