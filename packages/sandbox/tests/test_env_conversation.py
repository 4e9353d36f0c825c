"""``ConversationEnv`` and its domains: the core env suite, data-backed and injected tools, a
simulated user served by a real OpenAI-compatible HTTP server on loopback."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sandbox_tasks import CALC_TASK, SUPPORT_TASK

from agentsandbox import SandboxConfig
from agentsandbox.conversation import ConversationEnv
from agentsandbox.simulated_user import STOP, SimulatedUser
from agentsandbox.testing import require_backend
from knowlyrcore import make
from knowlyrcore.testing import EnvConformance


class TestConversationEnv(EnvConformance):
    task = SUPPORT_TASK
    actions = [
        {"tool": "query_stats", "params": {"query": "A101"}},
        {"tool": "web_search", "params": {"query": "shipping days"}},
        {"tool": "send_message", "params": {"recipient": "warehouse", "message": "check A101"}},
    ]
    terminal_action = {"tool": "respond", "params": {"message": "Order A101 is processing."}}

    def make_env(self):
        return make("knowlyr/conversation")


class TestAdvisoryEnv(EnvConformance):
    task = SUPPORT_TASK
    actions = [
        {"tool": "knowledge_base", "params": {"query": "refund days", "top_k": 1}},
        {"tool": "create_note", "params": {"title": "policy", "content": "14 days"}},
        {"tool": "respond", "params": {"message": "Refunds take up to 14 days."}},
    ]
    terminal_action = {"tool": "submit", "params": {"answer": "Refunds within 14 days."}}

    def make_env(self):
        return make("knowlyr/advisory")


class TestDiscussionEnv(EnvConformance):
    task = SUPPORT_TASK
    actions = [
        {"tool": "think", "params": {"thought": "shipping policy matters here"}},
        {"tool": "knowledge_base", "params": {"query": "gift cards"}},
    ]
    terminal_action = {"tool": "respond", "params": {"message": "Gift cards are final sale."}}

    def make_env(self):
        return make("knowlyr/discussion")


class _EngineeringSuite(EnvConformance):
    backend = ""
    task = {**CALC_TASK, "knowledge_base": SUPPORT_TASK["knowledge_base"]}
    actions = [
        {"tool": "read_file", "params": {"path": "calc.py"}},
        {"tool": "grep", "params": {"pattern": "return"}},
        {"tool": "git", "params": {"subcommand": "log"}},
        {"tool": "bash", "params": {"command": "python3 -c 'print(2 + 3)'"}},
        {"tool": "knowledge_base", "params": {"query": "refunds"}},
    ]
    terminal_action = {"tool": "submit", "params": {"answer": "add() subtracts; it should add."}}

    def make_env(self):
        require_backend(self.backend)
        return make("knowlyr/engineering", backend=self.backend, config=SandboxConfig(timeout=30))


@pytest.mark.integration
class TestEngineeringEnvLocal(_EngineeringSuite):
    backend = "local"


@pytest.mark.integration
class TestEngineeringEnvDocker(_EngineeringSuite):
    backend = "docker"


def test_data_backed_tools_answer_from_the_task():
    env = ConversationEnv()
    env.reset(task=SUPPORT_TASK)
    assert json.loads(env.step({"tool": "query_stats", "params": {"query": "A101"}}).observation)["status"] == (
        "processing"
    )
    filtered = env.step({"tool": "query_stats", "params": {"query": "", "filters": {"customer": "ana"}}})
    assert "A100" in filtered.observation and "A101" not in filtered.observation
    assert env.step({"tool": "query_stats", "params": {"query": "Z999"}}).observation == "no matching records"
    best = env.step({"tool": "web_search", "params": {"query": "how long does shipping take", "max_results": 1}})
    assert best.observation.startswith("[1] Shipping:")
    end = env.step({"tool": "respond", "params": {"message": "Your order A101 is still Processing."}})
    assert end.terminated and end.info["success"] is True and end.reward == 1.0


def test_missing_data_is_an_error_observation():
    env = ConversationEnv(domain="advisory")
    env.reset(task="no data here")
    result = env.step({"tool": "knowledge_base", "params": {"query": "anything"}})
    assert result.observation.startswith("[error] this task has no knowledge base")
    assert not result.done


def test_injected_tools_are_called_with_the_parameters_and_errors_reported():
    calls = []

    def lookup(query, filters=None):
        calls.append(query)
        return {"query": query, "hits": 1}

    def broken(**_):
        raise ValueError("backend down")

    env = ConversationEnv(tools={"query_stats": lookup, "escalate": broken})
    env.reset(task="help")
    assert "escalate" in env.available_tools
    assert json.loads(env.step({"tool": "query_stats", "params": {"query": "q1"}}).observation) == {
        "query": "q1",
        "hits": 1,
    }
    assert calls == ["q1"]
    failed = env.step({"tool": "escalate", "params": {}})
    assert failed.observation == "[error] tool escalate raised ValueError: backend down"


def test_wrong_answer_is_not_a_success():
    env = ConversationEnv()
    env.reset(task=SUPPORT_TASK)
    end = env.step({"tool": "respond", "params": {"message": "It was delivered yesterday."}})
    assert end.terminated and end.info["success"] is False and end.reward == 0.0


class _ScriptedUserModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint whose 'model' answers by the number of turns so far."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        turns = sum(1 for m in body["messages"] if m["role"] == "user")
        content = "Where is my order A101?" if turns == 1 else f"Great, thanks! {STOP}"
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def user_endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedUserModel)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_simulated_user_drives_the_dialog(user_endpoint):
    url = f"http://127.0.0.1:{user_endpoint.server_address[1]}/v1"
    env = make("knowlyr/conversation", user=SimulatedUser(url, "user-sim"))
    first = env.reset(task=SUPPORT_TASK)
    assert "User: Where is my order A101?" in first.observation
    system = user_endpoint.requests[0]["messages"][0]
    assert system["role"] == "system" and "status of order A101" in system["content"]
    end = env.step({"tool": "respond", "params": {"message": "A101 is processing."}})
    assert end.terminated and f"Great, thanks! {STOP}" in end.observation
    assert [m["role"] for m in end.info["transcript"]] == ["user", "assistant", "user"]
    assert end.info["success"] is True
    # the user model saw the agent's reply as its interlocutor's turn
    assert user_endpoint.requests[1]["messages"][-1] == {"role": "user", "content": "A101 is processing."}
