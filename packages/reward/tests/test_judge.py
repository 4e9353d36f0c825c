"""The judge over real HTTP: a local OpenAI-compatible server on loopback that injects failures.

The server here is scripted (it replies from a queue) because these tests are about the
client's transport, retry, parsing and abstention; tests/integration runs the judge against
a real model served by knowlyr-trainer.
"""

import json
import math
import socket
import threading
import time

import pytest

from knowlyrcore.testing import require_module

require_module("openai", "the judge needs the openai SDK (knowlyr-reward[llm], in [dev])")
uvicorn = require_module("uvicorn", "the scripted judge server needs uvicorn and starlette (in [dev])")
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from agentreward import Judge, JudgeError, JudgeSetupError, RewardEngine, parse_scores  # noqa: E402
from agentreward.judge import build_prompt, parse_success, parse_verdict  # noqa: E402


class ScriptedServer:
    def __init__(self):
        self.replies: list[tuple[int, str]] = []
        self.requests: list[dict] = []

        async def completions(request):
            body = await request.json()
            self.requests.append(body)
            status, text, *top = self.replies.pop(0) if self.replies else (200, "{}")
            if status != 200:
                return JSONResponse({"error": {"message": "injected failure"}}, status_code=status)
            choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            if top:  # the first token's likeliest alternatives, as [(token, logprob), ...]
                entry = lambda t, lp: {"token": t, "logprob": lp, "bytes": list(t.encode())}  # noqa: E731
                first = entry(*top[0][0])
                choice["logprobs"] = {"content": [{**first, "top_logprobs": [entry(*p) for p in top[0]]}]}
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [choice],
                }
            )

        app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"


TRAJ = {
    "task": {"description": "fix sort.py"},
    "steps": [
        {"tool_call": {"name": "read_file", "parameters": {"path": "sort.py"}}, "observation": {"output": "code"}},
        {"tool_call": {"name": "submit", "parameters": {}}, "observation": {"output": "done"}},
    ],
}


@pytest.fixture
def server():
    with ScriptedServer() as s:
        yield s


def test_scores_come_from_the_endpoint(server):
    server.replies = [(200, '{"goal_progress": 0.2, "tool_selection": 0.4, "param_correctness": 0.6}')] * 2
    judge = Judge(model="judge-m", base_url=server.url)
    scored = RewardEngine(judge=judge).score_record(TRAJ)
    assert scored["steps"][0]["rubric_scores"]["goal_progress"] == 0.2
    assert scored["steps"][0]["rubric_scores"]["param_correctness"] == 0.6
    assert judge.calls == 2 and server.requests[0]["model"] == "judge-m"
    assert "CURRENT STEP" in server.requests[0]["messages"][1]["content"]


def test_retries_after_errors_and_garbage(server):
    server.replies = [(500, ""), (200, "I think it is fine"), (200, 'Sure! {"goal_progress": 8, "tool_selection": 10}')]
    judge = Judge(model="m", base_url=server.url, max_retries=2)
    assert judge.score_step(TRAJ, 0) == {"goal_progress": 0.8, "tool_selection": 1.0}
    assert judge.calls == 3 and judge.failures == []
    # a transport error repeats the greedy request; an unusable reply is retried by sampling,
    # since the same greedy request to a deterministic model gets the same unusable reply
    assert [r["temperature"] for r in server.requests] == [0, 0, 0.7]


def test_retry_temperature_and_limits_are_settings(server):
    server.replies = [(200, "hmm"), (200, "still no"), (200, '{"goal_progress": 1}')]
    judge = Judge(model="m", base_url=server.url, max_retries=1, retry_temperature=1.0, max_tokens=40)
    assert judge.score_step(TRAJ, 0) is None and judge.calls == 2
    assert [(r["temperature"], r["max_tokens"]) for r in server.requests] == [(0, 40), (1.0, 40)]
    for bad in ({"max_retries": -1}, {"max_tokens": 0}, {"retry_temperature": 3}):
        with pytest.raises(ValueError, match="max_retries must be >= 0"):
            Judge(model="m", **bad)


def test_abstains_and_keeps_rule_scores_when_unusable(server):
    server.replies = [(200, "no idea")] * 10
    judge = Judge(model="m", base_url=server.url, max_retries=1)
    rules_only = RewardEngine().score_record(TRAJ)
    with_judge = RewardEngine(judge=judge).score_record(TRAJ)
    assert with_judge["steps"] == rules_only["steps"]
    assert len(judge.failures) == 2 and "no JSON object" in judge.failures[0]


def test_identical_prompts_are_cached(server):
    server.replies = [(200, '{"goal_progress": 1, "tool_selection": 1, "param_correctness": 1}')]
    judge = Judge(model="m", base_url=server.url)
    judge.score_step(TRAJ, 0)
    judge.score_step(TRAJ, 0)
    assert judge.calls == 1


def test_unreachable_endpoint_is_a_judge_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = Judge(model="m", base_url=f"http://127.0.0.1:{port}/v1", timeout=2)
    with pytest.raises(JudgeError, match="APIConnectionError"):
        judge.complete("hi")


def test_parse_scores():
    assert parse_scores('{"goal_progress": 0.5}') == {"goal_progress": 0.5}
    assert parse_scores('text {"bad": 1} then {"tool_selection": 7}') == {"tool_selection": 0.7}
    with pytest.raises(JudgeError, match="no JSON object"):
        parse_scores('{"goal_progress": 42}')
    with pytest.raises(JudgeError):
        parse_scores("")


def test_parse_scores_reads_name_value_prose():
    # a reply SmolLM2-135M gave to a tau-bench step: no JSON, but the scores are there
    reply = (
        "The current step is:\n\n- The goal_progress: 0.1, the task is completed.\n"
        "- The tool_selection: 1. The tool is asked to select the tool\n- The param_correctness: 1."
    )
    assert parse_scores(reply) == {"goal_progress": 0.1, "tool_selection": 1.0, "param_correctness": 1.0}
    assert parse_scores("'goal_progress' = 7, param_correctness is 0.25") == {
        "goal_progress": 0.7,
        "param_correctness": 0.25,
    }
    # a JSON object with the scores wins over prose; out-of-range or unnamed numbers are no scores
    assert parse_scores('goal_progress: 0.1 then {"goal_progress": 0.9}') == {"goal_progress": 0.9}
    for unusable in ("goal_progress: 42", "goal progress: 0.5", "my_goal_progress: 0.5", "goal_progress: high"):
        with pytest.raises(JudgeError, match="no JSON object"):
            parse_scores(unusable)
    assert parse_success("I estimate task_success is 0.3.") == 0.3
    assert parse_success('{"task_success": 8}') == 0.8
    with pytest.raises(JudgeError, match="task_success"):
        parse_success("Yes, the agent succeeded.")


def test_prompt_shows_history_and_step():
    prompt = build_prompt(TRAJ, 1)
    assert "[0] read_file" in prompt and "tool: submit" in prompt and "TASK: fix sort.py" in prompt
    assert json.dumps({"path": "sort.py"}) in prompt


def test_provider_is_checked():
    with pytest.raises(ValueError, match="provider"):
        Judge(model="m", provider="cohere")


def test_the_policy_goes_into_the_prompt():
    with_policy = {**TRAJ, "metadata": {"system_prompt": "# Shop policy\nAsk for a yes before any refund."}}
    assert "POLICY: # Shop policy" in build_prompt(with_policy, 0)
    assert "POLICY" not in build_prompt(TRAJ, 0)


def test_trajectory_mode_blends_one_verdict_into_the_total(server):
    server.replies = [(200, 'Reasoning... {"task_success": 0.9}')]
    judge = Judge(model="m", base_url=server.url, mode="trajectory")
    rules_only = RewardEngine().score_record(TRAJ)
    scored = RewardEngine(judge=judge).score_record(TRAJ)
    assert judge.calls == 1 and "TRANSCRIPT:" in server.requests[0]["messages"][1]["content"]
    assert scored["steps"] == rules_only["steps"]  # no per-step judging in this mode
    assert scored["metadata"]["judge_task_success"] == 0.9
    assert scored["reward"] == round((rules_only["reward"] + 0.9) / 2, 6)


def test_trajectory_mode_abstains_to_the_rule_total(server):
    server.replies = [(200, '{"task_success": 42}'), (200, "cannot tell")]
    judge = Judge(model="m", base_url=server.url, mode="trajectory", max_retries=1)
    assert RewardEngine(judge=judge).score_record(TRAJ)["reward"] == RewardEngine().score_record(TRAJ)["reward"]
    assert judge.failures and judge.failures[0].startswith("trajectory: no JSON object (or `name: value` text) with")


def test_both_modes_and_bad_mode(server):
    server.replies = [(200, '{"goal_progress": 0.5, "tool_selection": 0.5, "param_correctness": 0.5}')] * 2 + [
        (200, '{"task_success": 0.0}')
    ]
    judge = Judge(model="m", base_url=server.url, mode="both")
    scored = RewardEngine(judge=judge).score_record(TRAJ)
    assert judge.calls == 3 and scored["metadata"]["judge_task_success"] == 0.0
    with pytest.raises(ValueError, match="mode must be one of"):
        Judge(model="m", mode="steps")


def test_eval_with_a_judge_reports_its_calls_and_progress(server, tmp_path, capsys):
    from agentreward.cli import main

    records = [
        {**TRAJ, "id": "ok", "outcome": {"success": True}},
        {**TRAJ, "id": "bad", "task": {"description": "fix list.py"}, "outcome": {"success": False}},
    ]
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    # one trajectory-mode request each: prose for the success, then an unusable reply and its retry
    server.replies = [(200, "task_success: 0.9"), (200, "no idea"), (200, "no idea either")]
    args = ["eval", str(path), "--judge-url", server.url, "--judge-model", "m", "--judge-mode", "trajectory"]
    assert main([*args, "--judge-retries", "1", "--judge-max-tokens", "32"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["judge_calls"] == 3 and report["judge_abstentions"] == 1 and report["auc"] == 1.0
    assert [r["max_tokens"] for r in server.requests] == [32, 32, 32]
    assert "  1 scored… (judge: 1 calls, 0 abstentions)" in err and "  2 scored… (judge: 3 calls, 1 abstentions)" in err


def test_parse_verdict_by_hand():
    # P(Yes) = (e^-0.5 + e^-2) / (e^-0.5 + e^-2 + e^-1), the two spellings of yes summed
    top = [(" Yes", -0.5), ("No", -1.0), ("yes.", -2.0), ("The", -3.0)]
    assert parse_verdict(top) == pytest.approx(0.6685, abs=1e-4)  # 0.74187 / 1.10975
    assert parse_verdict([("NO", -0.1)]) == 0.0
    with pytest.raises(JudgeError, match="neither Yes nor No among the reply's 2 likeliest first tokens"):
        parse_verdict([("The", -0.1), ("Yesterday", -1.0)])


def test_logprobs_verdict_reads_p_yes_for_steps_and_trajectories(server):
    server.replies = [
        (200, "Yes", [("Yes", -0.2), ("No", -1.9), ("The", -2.5)]),  # step 0
        (200, "The", [("The", -0.1), ("I", -0.5)]),  # step 1: no verdict among the tokens: abstain, no retry
        (200, "No", [("No", -0.3), ("Yes", -1.4)]),  # the trajectory
    ]
    judge = Judge(model="m", base_url=server.url, mode="both", verdict="logprobs")
    rules_only = RewardEngine().score_record(TRAJ)
    scored = RewardEngine(judge=judge).score_record(TRAJ)
    p_step = math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.9))
    assert scored["steps"][0]["rubric_scores"]["goal_progress"] == pytest.approx(p_step, abs=1e-6)
    assert scored["steps"][0]["rubric_scores"]["param_correctness"] == pytest.approx(p_step, abs=1e-6)
    assert scored["steps"][1] == rules_only["steps"][1]  # abstained
    p_traj = math.exp(-1.4) / (math.exp(-0.3) + math.exp(-1.4))
    assert scored["metadata"]["judge_task_success"] == pytest.approx(p_traj, abs=1e-6)
    assert judge.calls == 3 and len(judge.failures) == 1 and "neither Yes nor No" in judge.failures[0]
    first = server.requests[0]
    assert (first["max_tokens"], first["logprobs"], first["top_logprobs"], first["temperature"]) == (1, True, 20, 0)
    assert first["messages"][1]["content"].endswith("Answer Yes or No.")
    assert "TRANSCRIPT:" in server.requests[2]["messages"][1]["content"]


def test_logprobs_verdict_needs_an_endpoint_that_returns_them(server):
    server.replies = [(200, "Yes")]  # no logprobs in the reply
    judge = Judge(model="m", base_url=server.url, verdict="logprobs")
    with pytest.raises(JudgeSetupError, match="returned no logprobs for model 'm'.*--judge-verdict text"):
        RewardEngine(judge=judge).score_record(TRAJ)
    with pytest.raises(ValueError, match="Anthropic's API has no logprobs"):
        Judge(model="m", provider="anthropic", verdict="logprobs")
    with pytest.raises(ValueError, match="verdict must be one of text, logprobs"):
        Judge(model="m", verdict="score")
