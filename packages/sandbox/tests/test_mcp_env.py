"""``knowlyr/mcp`` against real MCP servers nobody here wrote: mcp-server-git, mcp-server-time and
mcp-server-sqlite (installed in their own virtualenv, found through ``$KNOWLYR_MCP_PATH``).

Each runs in bubblewrap with a per-episode copy of its workspace; the suites here are the
shared ``EnvConformance``, episode isolation (a write in one episode is gone in the next), the
task checks and rewards, and the tool listing the task generator uses.
"""

import os
import sqlite3
import subprocess
import uuid

import pytest

from knowlyrcore.testing import EnvConformance, require_module

require_module("mcp", "the MCP env needs mcp (knowlyr-sandbox[mcp], in [dev])")
from agentsandbox.mcp import WORKSPACE_MOUNT, MCPEnv, episode_profile, list_server_tools  # noqa: E402
from agentsandbox.testing import require_mcp_server  # noqa: E402
from knowlyrcore.domain import ToolCategory, get_domain_profile  # noqa: E402
from knowlyrcore.errors import InputError  # noqa: E402

pytestmark = pytest.mark.integration

#: No --repository: the server's tools list before a reset (EnvConformance asks), and the sandbox
#: confines it to the workspace (test_mcp_hostile.py runs it both ways).
GIT = "mcp-server-git"
TIME = "mcp-server-time --local-timezone UTC"
SQLITE = "mcp-server-sqlite --db-path {workspace}/shop.db"
RESPOND = {"tool": "respond", "params": {"message": "done"}}
RECIPE = {
    "default_branch": "main",
    "commits": [
        {
            "author": "Ada Lovelace",
            "email": "ada@example.com",
            "date": "2024-03-01T10:00:00+00:00",
            "message": "Add parser",
            "branch": "main",
            "files": {"src/parser.py": "PARSER = 1\n"},
        },
        {
            "author": "Alan Turing",
            "email": "alan@example.com",
            "date": "2024-03-02T10:00:00+00:00",
            "message": "Tune parser",
            "branch": "main",
            "files": {"src/parser.py": "PARSER = 2\n"},
        },
    ],
    "checkout": "main",
    "unstaged": {"notes.txt": "draft\n"},
}


def git(cwd, *args):
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    ident = ["-c", "user.name=Grace Hopper", "-c", "user.email=grace@example.com", "-c", "init.defaultBranch=main"]
    subprocess.run(["git", *ident, *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A small repository with one commit and an untracked file, built with git."""
    root = tmp_path_factory.mktemp("repo")
    git(root, "init", "-q", ".")
    (root / "README.md").write_text("# shop\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "Initial commit")
    (root / "notes.txt").write_text("draft\n")
    return root


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """A directory holding shop.db, a SQLite database with two products."""
    root = tmp_path_factory.mktemp("shop")
    with sqlite3.connect(root / "shop.db") as db:
        db.execute("CREATE TABLE products (name TEXT, price REAL)")
        db.executemany("INSERT INTO products VALUES (?, ?)", [("kettle", 30.0), ("teapot", 12.5)])
    return root


class TestGitConformance(EnvConformance):
    task = {"id": "git", "description": "Who made the last commit?", "metadata": {"workspace": {"git": RECIPE}}}
    actions = [
        {"tool": "git_status", "params": {"repo_path": WORKSPACE_MOUNT}},
        {"tool": "git_log", "params": {"repo_path": WORKSPACE_MOUNT, "max_count": 1}},
    ]
    terminal_action = RESPOND

    def make_env(self):
        require_mcp_server(GIT)
        return MCPEnv(server=GIT)


class TestTimeConformance(EnvConformance):
    task = {"id": "time", "description": "What time is it in Tokyo?"}
    actions = [{"tool": "get_current_time", "params": {"timezone": "Asia/Tokyo"}}]
    terminal_action = RESPOND

    def make_env(self):
        require_mcp_server(TIME)
        return MCPEnv(server=TIME)


class TestSqliteConformance(EnvConformance):
    actions = [
        {"tool": "list_tables", "params": {}},
        {"tool": "read_query", "params": {"query": "SELECT name FROM products ORDER BY price"}},
    ]
    terminal_action = RESPOND

    @pytest.fixture(autouse=True)
    def _task(self, shop):
        type(self).task = {
            "id": "sqlite",
            "description": "List the products.",
            "metadata": {"workspace": {"copy": str(shop)}},
        }

    def make_env(self):
        require_mcp_server(SQLITE)
        return MCPEnv(server=SQLITE)


def test_git_episodes_are_isolated(repo):
    require_mcp_server(GIT)
    task = {"id": "write", "description": "Commit the notes.", "metadata": {"workspace": {"copy": str(repo)}}}
    with MCPEnv(server=GIT) as env:
        env.reset(task=task)
        assert (
            "staged"
            in env.step(
                {"tool": "git_add", "params": {"repo_path": "/workspace", "files": ["notes.txt"]}}
            ).observation.lower()
        )
        env.step({"tool": "git_commit", "params": {"repo_path": "/workspace", "message": "Leak into the next episode"}})
        assert (
            "Leak into the next episode"
            in env.step({"tool": "git_log", "params": {"repo_path": "/workspace"}}).observation
        )
        env.reset(task=task)
        log = env.step({"tool": "git_log", "params": {"repo_path": "/workspace"}}).observation
        status = env.step({"tool": "git_status", "params": {"repo_path": "/workspace"}}).observation
    assert "Leak" not in log and "Initial commit" in log
    assert "notes.txt" in status  # untracked again
    assert "Leak" not in subprocess.run(["git", "log"], cwd=repo, capture_output=True, text=True).stdout


def test_sqlite_episodes_are_isolated(shop):
    require_mcp_server(SQLITE)
    task = {"id": "insert", "description": "Add a mug.", "metadata": {"workspace": {"copy": str(shop)}}}
    count = {"tool": "read_query", "params": {"query": "SELECT COUNT(*) AS n FROM products"}}
    with MCPEnv(server=SQLITE) as env:
        env.reset(task=task)
        ts = env.step({"tool": "write_query", "params": {"query": "INSERT INTO products VALUES ('mug', 8.0)"}})
        assert not ts.info.get("error"), ts.observation
        assert "3" in env.step(count).observation
        env.reset(task=task)
        assert "2" in env.step(count).observation
    with sqlite3.connect(shop / "shop.db") as db:
        assert db.execute("SELECT COUNT(*) FROM products").fetchone() == (2,)


def _checked_task(**metadata):
    return {
        "id": "checked",
        "description": "Who wrote the parser?",
        "metadata": {"workspace": {"git": RECIPE}, **metadata},
    }


STATE_CHECKS = [
    {"tool": "git_log", "arguments": {"repo_path": "{workspace}"}, "contains": ["Tune parser"]},
    {"command": ["git", "log", "-1", "--format=%an"], "equals": "Alan Turing"},
    {"command": ["git", "status", "--porcelain"], "contains": ["?? notes.txt"], "excludes": ["A  notes.txt"]},
]


def test_answer_and_state_checks_decide_success():
    require_mcp_server(GIT)
    with MCPEnv(server=GIT, reward="partial") as env:
        env.reset(
            task=_checked_task(answer_contains=["alan turing"], answer_excludes=["Ada"], state_checks=STATE_CHECKS)
        )
        done = env.step({"tool": "respond", "params": {"message": "Alan Turing tuned it."}})
        assert (done.terminated, done.reward, done.info["success"]) == (True, 1.0, True)
        assert done.info["answer_ok"] and done.info["state_ok"] and len(done.info["checks"]) == 4

        env.reset(task=_checked_task(answer_contains=["Alan Turing"], state_checks=STATE_CHECKS))
        env.step({"tool": "git_add", "params": {"repo_path": WORKSPACE_MOUNT, "files": ["notes.txt"]}})
        done = env.step({"tool": "respond", "params": {"message": "Ada Lovelace"}})
        failed = [check["check"] for check in done.info["checks"] if not check["ok"]]
        assert failed == ["answer", "command git status --porcelain"]
        assert done.info["success"] is False and done.reward == pytest.approx(0.5 * 2 / 4)


def test_rubric_only_task_leaves_success_to_the_judge():
    require_mcp_server(TIME)
    task = {"id": "r", "description": "Greet me.", "metadata": {"rubric": "A friendly greeting."}}
    with MCPEnv(server=TIME) as env:
        env.reset(task=task)
        done = env.step({"tool": "respond", "params": {"message": "Hello!"}})
    assert (done.reward, done.info["success"], done.info["rubric"]) == (0.0, None, "A friendly greeting.")


def test_malformed_task_checks_are_refused_in_one_line():
    require_mcp_server(TIME)
    with MCPEnv(server=TIME) as env:
        with pytest.raises(InputError, match=r"state_checks\[0\]: must have exactly one of 'tool' and 'command'"):
            env.reset(task={"id": "bad", "description": "x", "metadata": {"state_checks": [{"contains": ["x"]}]}})
        with pytest.raises(InputError, match=r"metadata.workspace: must be"):
            env.reset(task={"id": "bad", "description": "x", "metadata": {"workspace": {"zip": "x"}}})


def test_policy_errors_are_observations():
    require_mcp_server(GIT)
    with MCPEnv(server=GIT, max_observation_chars=60) as env:
        env.reset(task=_checked_task())
        assert env.step({"tool": "rm_rf", "params": {}}).observation.startswith("[error] unknown tool 'rm_rf'")
        wrong = env.step({"tool": "git_log", "params": {"repo_path": WORKSPACE_MOUNT, "max_count": "ten"}})
        assert wrong.observation.startswith("[error] tool 'git_log': invalid parameters at 'max_count'")
        failed = env.step({"tool": "git_show", "params": {"repo_path": WORKSPACE_MOUNT, "revision": "no-such-rev"}})
        assert failed.observation.startswith("[error] ") and failed.info["error"]
        clipped = env.step({"tool": "git_log", "params": {"repo_path": WORKSPACE_MOUNT}}).observation
        assert clipped.endswith("more characters cut]") and len(clipped) < 120
        assert not env.step({"tool": "git_status", "params": {"repo_path": WORKSPACE_MOUNT}}).done


def test_hostile_values_give_error_observations():
    require_mcp_server(GIT)
    huge = 10**4999  # 5000 digits; written as a literal string it would pass Python's own digit limit first
    deep: dict = {}
    for _ in range(200):
        deep = {"x": deep}
    with MCPEnv(server=GIT) as env:
        env.reset(task=_checked_task())
        for params in (
            {"repo_path": "\ud800"},
            {"repo_path": WORKSPACE_MOUNT, "max_count": huge},
            {"repo_path": WORKSPACE_MOUNT, "max_count": deep},
            {"repo_path": WORKSPACE_MOUNT, "start_timestamp": float("nan")},
            {"repo_path": "x" * (2 << 20)},
        ):
            ts = env.step({"tool": "git_log", "params": params})
            assert ts.observation.startswith("[error] ") and not ts.done
        for action in ({"tool": "\udcff" * 10_000}, {"tool": "git_log", "params": [1]}, "git_log"):
            assert env.step(action).observation.startswith("[error] ")
        assert "Tune parser" in env.step({"tool": "git_log", "params": {"repo_path": WORKSPACE_MOUNT}}).observation


def test_tools_become_the_episode_profile_and_a_short_prompt():
    require_mcp_server(GIT)
    with MCPEnv(server=GIT) as env:
        env.reset(task=_checked_task())
        assert env.domain.startswith("mcp/") and len(env.domain) == 4 + 16
        assert env.available_tools[-1] == "respond" and "git_log" in env.available_tools
        lines = env.system_prompt.splitlines()
        assert "git_log(repo_path, max_count?, start_timestamp?, end_timestamp?)" in lines
        assert lines[-1] == "respond(message)"


def test_list_server_tools():
    require_mcp_server(TIME)
    tools = list_server_tools(server=TIME)
    by_name = {tool["name"]: tool for tool in tools}
    assert {"get_current_time", "convert_time"} <= set(by_name)
    assert by_name["get_current_time"]["input_schema"]["required"] == ["timezone"]
    assert by_name["get_current_time"]["description"]
    assert by_name["get_current_time"]["read_only"] is True  # mcp-server-time annotates its tools


def _categories(profile):
    return {spec.name: spec.category for spec in profile.tools}


def test_read_only_annotations_become_tool_categories():
    require_mcp_server(GIT)
    with MCPEnv(server=GIT) as env:
        env.reset(task=_checked_task())
        categories = _categories(get_domain_profile(env.domain))
    assert categories["git_log"] == categories["git_status"] == ToolCategory.READ
    assert categories["git_commit"] == categories["git_add"] == ToolCategory.WRITE
    assert categories["respond"] == ToolCategory.COMMUNICATE


def test_tools_without_annotations_are_other():
    require_mcp_server(SQLITE)
    tools = list_server_tools(server=SQLITE)
    assert {tool["read_only"] for tool in tools} == {None}  # mcp-server-sqlite does not annotate
    categories = _categories(episode_profile(tools))
    assert categories["read_query"] == categories["write_query"] == ToolCategory.OTHER


def test_the_profile_digest_covers_the_categories():
    tool = {"name": "touch", "description": "", "input_schema": {"type": "object"}}
    profiles = [episode_profile([{**tool, "read_only": flag}]) for flag in (True, False, None)]
    assert len({profile.name for profile in profiles}) == 3
    assert [p.get_tool("touch").category for p in profiles] == [
        ToolCategory.READ,
        ToolCategory.WRITE,
        ToolCategory.OTHER,
    ]


@pytest.mark.integration
def test_an_env_lists_the_tools_its_server_listed_before_without_starting_it():
    """A rollout reads every env's tools before its reset: one listing serves every env of the
    same server, so an episode starts its server once, at its reset."""
    require_mcp_server(TIME)
    mine = {"KNOWLYR_TEST_RUN": uuid.uuid4().hex}  # a server configured as no other test's is
    with MCPEnv(server=TIME, env=mine) as first:
        tools = first.available_tools
        assert first.client is not None  # nothing was listed yet: it asked its own server
    with MCPEnv(server=TIME, env=mine) as second:
        assert second.available_tools == tools and second.client is None
        second.reset(task={"id": "t", "description": "time?"})
        assert second.client is not None and second.available_tools == tools
    with MCPEnv(server=TIME, env={**mine, "TZ": "UTC"}) as other:  # another environment: another server
        assert other.available_tools == tools and other.client is not None
