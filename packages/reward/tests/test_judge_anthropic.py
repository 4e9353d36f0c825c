"""The judge's Anthropic path against a real messages-API server on loopback: a verdict, not an
abstention, whatever keywords the installed SDK's ``messages.create`` takes (anthropic 2.x dropped
``temperature``, and every call raised ``TypeError`` before a byte was sent)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from knowlyrcore.testing import require_module

require_module("anthropic", "the anthropic judge needs the anthropic SDK (knowlyr-reward[llm], in [dev])")

from agentreward import Judge, RewardEngine  # noqa: E402

TRAJ = {
    "task": {"description": "fix sort.py"},
    "steps": [
        {"tool_call": {"name": "read_file", "parameters": {"path": "sort.py"}}, "observation": {"output": "code"}},
        {"tool_call": {"name": "submit", "parameters": {}}, "observation": {"output": "done"}},
    ],
}
SCORES = '{"goal_progress": 0.9, "tool_selection": 0.8, "param_correctness": 0.7}'


class MessagesServer:
    """Answers ``POST /v1/messages`` as Anthropic's API does, keeping each request's path and body."""

    def __init__(self):
        self.requests: list[tuple[str, dict]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append((self.path, body))
                reply = json.dumps(
                    {
                        "id": "msg_1",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model"),
                        "content": [{"type": "text", "text": SCORES}],
                        "stop_reason": "end_turn",
                        "usage": {"input_tokens": 1, "output_tokens": 1},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_the_anthropic_judge_gives_verdicts_with_its_sampling_options_in_the_body(temperature):
    with MessagesServer() as server:
        judge = Judge(model="claude-test", provider="anthropic", base_url=server.url, api_key="k", max_retries=0)
        assert json.loads(judge.complete("score this", system="you judge", temperature=temperature)) == json.loads(
            SCORES
        )
        scored = RewardEngine(judge=judge).score_record(TRAJ)
    assert judge.failures == []
    assert scored["steps"] != RewardEngine().score_record(TRAJ)["steps"]  # the judge's scores were used
    path, body = server.requests[0]
    assert path == "/v1/messages"
    assert body["temperature"] == temperature and body["system"] == "you judge" and body["model"] == "claude-test"
    assert body["messages"] == [{"role": "user", "content": "score this"}] and body["max_tokens"] == judge.max_tokens
