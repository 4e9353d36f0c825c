"""The judge against a hostile endpoint: every reply is untrusted input, so a crafted one must
become an abstention (counted in ``judge.failures``, the rule scores kept), never a traceback out
of scoring, and a slow one must not hold a call past its deadline.

The server is a real ``ThreadingHTTPServer`` on loopback writing raw bytes, so the client's whole
path (SDK, transport, body reading and parsing) runs as it does against a remote judge.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from knowlyrcore.testing import require_module

require_module("openai", "the judge needs the openai SDK (knowlyr-reward[llm], in [dev])")

from agentreward import Judge, RewardEngine  # noqa: E402

TRAJ = {
    "task": {"description": "fix sort.py"},
    "steps": [
        {"tool_call": {"name": "read_file", "parameters": {"path": "sort.py"}}, "observation": {"output": "code"}},
        {"tool_call": {"name": "submit", "parameters": {}}, "observation": {"output": "done"}},
    ],
}
SCORES = '{"goal_progress": 0.9, "tool_selection": 0.9, "param_correctness": 0.9}'


def completion(content=SCORES, **extra):
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice], **extra}


def with_logprob(logprob):
    reply = completion("Yes")
    first = {"token": "Yes", "logprob": logprob, "bytes": None}
    reply["choices"][0]["logprobs"] = {"content": [{**first, "top_logprobs": [first]}]}
    return json.dumps(reply)


class HostileJudge:
    """Answers every POST with ``body`` (bytes); ``drip`` seconds between bytes when set, and
    ``drip_headers`` to drip the status line and headers too."""

    def __init__(self, body: bytes, drip: float | None = None, drip_headers: bool = False):
        self.body, self.drip, self.drip_headers = body, drip, drip_headers
        self.stop = threading.Event()
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                head = (
                    f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(hostile.body)}\r\n\r\n"
                ).encode()
                if hostile.drip is None:
                    self.wfile.write(head + hostile.body)
                    return
                if not hostile.drip_headers:
                    self.wfile.write(head)
                    self.wfile.flush()
                    head = b""
                try:
                    for i in range(len(head + hostile.body)):
                        if hostile.stop.wait(hostile.drip):
                            return
                        self.wfile.write((head + hostile.body)[i : i + 1])
                        self.wfile.flush()
                except OSError:  # the client hung up: what the deadline is for
                    return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


HOSTILE_BODIES = {
    # json refuses ints over 4300 digits with a plain ValueError (not JSONDecodeError)
    "huge_integer": json.dumps(completion(SCORES, usage={"prompt_tokens": 0})).replace(
        '"prompt_tokens": 0', '"prompt_tokens": ' + "7" * 5000
    ),
    "long_integer_in_content": json.dumps(completion('{"goal_progress": ' + "7" * 400 + "}")),  # float() overflows
    "huge_integer_in_content": json.dumps(completion('{"goal_progress": ' + "7" * 5000 + "}")),
    # the C scanner recurses once per level: RecursionError long before memory runs out
    "deep_nesting": json.dumps(completion(SCORES))[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep_nesting_in_content": json.dumps(completion('{"goal_progress": ' + "[" * 100_000 + "]" * 100_000 + "}")),
    "no_choices": json.dumps({**completion(), "choices": []}),
    "content_not_a_string": json.dumps(completion({"goal_progress": 0.9})),
    "choice_not_an_object": json.dumps({**completion(), "choices": ["Yes"]}),
    # a valid reply padded past the size cap: refused before parsing, not read into memory whole
    "oversized": json.dumps(completion(SCORES)) + " " * (3 << 20),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_a_hostile_text_reply_is_an_abstention(name):
    with HostileJudge(HOSTILE_BODIES[name].encode()) as server:
        judge = Judge(model="m", base_url=server.url, max_retries=1)
        scored = RewardEngine(judge=judge).score_record(TRAJ)
    assert scored["steps"] == RewardEngine().score_record(TRAJ)["steps"]  # the rule scores kept
    assert len(judge.failures) == 2 and judge.calls == 4  # both steps abstained, each after its retry


LOGPROBS = {
    "overflowing_logprob": 1000,  # math.exp(1000) overflows
    "string_logprob": "high",  # math.exp("high") is a TypeError
    "nan_logprob": float("nan"),  # json writes NaN, which Python's json reads back
    "positive_logprob": 0.5,  # a probability above 1
}


@pytest.mark.parametrize("name", sorted(LOGPROBS))
def test_a_hostile_logprob_is_an_abstention(name):
    with HostileJudge(with_logprob(LOGPROBS[name]).encode()) as server:
        judge = Judge(model="m", base_url=server.url, mode="both", verdict="logprobs")
        scored = RewardEngine(judge=judge).score_record(TRAJ)
    rules_only = RewardEngine().score_record(TRAJ)
    assert scored["steps"] == rules_only["steps"] and scored["reward"] == rules_only["reward"]
    assert len(judge.failures) == 3  # two steps and the trajectory verdict


def test_the_abstentions_are_counted_in_the_eval_report(tmp_path, capsys):
    from agentreward.cli import main

    path = tmp_path / "labelled.jsonl"
    records = [
        {**TRAJ, "id": "a", "outcome": {"success": True}},
        {**TRAJ, "id": "b", "task": {"description": "fix list.py"}, "outcome": {"success": False}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with HostileJudge(HOSTILE_BODIES["no_choices"].encode()) as server:
        args = ["eval", str(path), "--judge-url", server.url, "--judge-model", "m", "--judge-mode", "trajectory"]
        assert main([*args, "--judge-retries", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["judge_calls"] == 2 and report["judge_abstentions"] == 2


@pytest.mark.parametrize("drip_headers", [False, True], ids=["body", "headers"])
def test_a_dripping_judge_is_cut_off_at_the_call_deadline(drip_headers):
    # each byte comes well within the 60 s read timeout, so only a deadline over the whole call ends it
    with HostileJudge(json.dumps(completion()).encode(), drip=0.2, drip_headers=drip_headers) as server:
        judge = Judge(model="m", base_url=server.url, max_retries=0, call_deadline=1.0)
        assert judge.score_step(TRAJ, 0) is None
    assert len(judge.failures) == 1 and "deadline" in judge.failures[0]


def test_after_the_run_deadline_the_remaining_calls_abstain():
    with HostileJudge(json.dumps(completion()).encode()) as server:
        judge = Judge(model="m", base_url=server.url, max_retries=0, run_deadline=0.5)
        assert judge.score_step(TRAJ, 0) is not None  # the first call starts the run's clock
        time.sleep(0.6)
        scored = RewardEngine(judge=judge).score_record(TRAJ)
    assert scored["steps"][1] == RewardEngine().score_record(TRAJ)["steps"][1]
    assert judge.calls == 1 and len(judge.failures) == 1 and "run deadline" in judge.failures[0]
