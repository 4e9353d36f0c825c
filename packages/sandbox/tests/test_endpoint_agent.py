"""EndpointAgent against a real loopback OpenAI-compatible server: function calling, the tool
result threaded back as a ``tool`` message, a text reply mapped to the domain's closing tool,
and a clear error when the endpoint is down."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentsandbox.agents import AgentError, EndpointAgent


class _ToolCallingModel(BaseHTTPRequestHandler):
    """First reply: a ``bash`` tool call; once a tool result has come back: plain text."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, self.headers["Authorization"], body))
        if any(m["role"] == "tool" for m in body["messages"]):
            message = {"role": "assistant", "content": "All tests pass now."}
        else:
            call = {"id": "call_7", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            message = {"role": "assistant", "content": "Look first.", "tool_calls": [call]}
        payload = json.dumps({"choices": [{"message": message}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def model_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ToolCallingModel)
    server.requests = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_tool_call_then_closing_reply(model_server):
    url = f"http://127.0.0.1:{model_server.server_address[1]}/v1"
    agent = EndpointAgent(url, "policy", domain="coding", api_key="k-1")
    action = agent("Task: fix the failing test")
    assert action == {"tool": "bash", "params": {"command": "ls"}, "thought": "Look first."}
    path, auth, first = model_server.requests[0]
    assert path == "/v1/chat/completions" and auth == "Bearer k-1"
    assert first["model"] == "policy" and "bash" in {t["function"]["name"] for t in first["tools"]}

    closing = agent("file1.py\nfile2.py")
    assert closing["tool"] == agent.closing_tool and "All tests pass now." in closing["params"].values()
    second = model_server.requests[1][2]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_7", "content": "file1.py\nfile2.py"}
    assert second[-2]["tool_calls"][0]["id"] == "call_7"


def test_unreachable_endpoint_is_an_agent_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    agent = EndpointAgent(f"http://127.0.0.1:{port}/v1", "policy", domain="coding", timeout=5)
    with pytest.raises(AgentError, match="policy endpoint"):
        agent("Task: anything")
