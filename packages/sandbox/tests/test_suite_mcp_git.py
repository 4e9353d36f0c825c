"""The ``mcp-git`` suite: its ground truth checked against git itself, answer checks that a stuffed
answer cannot pass, write checks that doing nothing cannot pass, splits that share no repository
entity or phrasing; and, against the real ``mcp-server-git`` in bubblewrap, ``SuiteConformance``
(the expert solves every task, policies that do no work earn nothing) and a system prompt that
names exactly the tools the server lists.

The unit tests build repositories with git and need nothing else; the integration tests need
``mcp-server-git`` (on PATH or in ``$KNOWLYR_MCP_PATH``) and a working bubblewrap.
"""

import os
import re
import subprocess

import pytest

from agentsandbox.mcp.gitrepo import build_repository
from agentsandbox.suites import SuiteError, get_suite
from agentsandbox.suites.mcp_git import (
    COUNT_WORDS,
    MCP_GIT,
    PHRASINGS,
    POOLS,
    ROLES,
    SEEN_TEMPLATES,
    TEMPLATES,
    UNSEEN_TEMPLATES,
    check_answer_check,
)
from agentsandbox.testing import SuiteConformance, require_mcp_server

WRITE_TOOLS = {"git_add", "git_commit", "git_create_branch"}
WRITE_TEMPLATES = {"stage_file", "commit_staged", "create_branch", "stage_and_commit", "stage_two"}
#: One answer naming every candidate of every asked fact: each author, message, file and branch of
#: both sides' pools, and every count in digits and words.
STUFFED = " ".join(
    [*POOLS.authors, *POOLS.messages, *POOLS.files, *POOLS.branches, "main"]
    + [f"{k} commits, {COUNT_WORDS[k]} commits" for k in range(1, 11)]
)


def answer_passes(task, message):
    meta = task["metadata"]
    text = message.casefold()
    return all(f.casefold() in text for f in meta["answer_contains"]) and not any(
        w.casefold() in text for w in meta["answer_excludes"]
    )


def is_write(task):
    return any(call["tool"] in WRITE_TOOLS for call in task["metadata"]["solution"])


def expert_answer(task):
    return task["metadata"]["solution"][-1]["params"]["message"]


def git(repo, *args, env=None):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=env).stdout


def check_holds(repo, check):
    """A command state check, judged as ``agentsandbox.mcp.checks`` does (exit 0, contains, stripped equals)."""
    done = subprocess.run(check["command"], cwd=repo, capture_output=True, text=True)
    text = done.stdout + done.stderr
    return (
        done.returncode == 0
        and all(n in text for n in check.get("contains", []))
        and not any(n in text for n in check.get("excludes", []))
        and ("equals" not in check or text.strip() == check["equals"].strip())
    )


AGENT = {**os.environ, **MCP_GIT.env_kwargs["env"], "GIT_CONFIG_NOSYSTEM": "1"}


def apply_writes(repo, solution):
    """The expert's writes done with the git command line instead of the server."""
    for call in solution:
        params = call["params"]
        if call["tool"] == "git_add":
            git(repo, "add", "--", *params["files"])
        elif call["tool"] == "git_commit":
            git(repo, "commit", "-q", "-m", params["message"], env=AGENT)
        elif call["tool"] == "git_create_branch":
            git(repo, "branch", params["branch_name"], params["base_branch"])


def tasks_of_every_template(seeds, per_seed=None):
    for split in MCP_GIT.splits:
        templates = ROLES["demonstrated" if split != "test-unseen" else "held_out"]
        for seed in seeds:
            yield from MCP_GIT.generate(split, per_seed or len(templates), seed)


# -- ground truth against git ------------------------------------------------------------------


def named_in(description, candidates):
    (found,) = [c for c in candidates if c in description]
    return found


def git_truth(task, repo):
    """What git says the asked fact is, and the other candidates of it in the repository."""
    template, description = task["metadata"]["template"], task["description"]
    subjects = git(repo, "log", "--format=%H %s").splitlines()
    files = set(git(repo, "log", "--all", "--name-only", "--format=").split())
    files |= {line[3:] for line in git(repo, "status", "--porcelain").splitlines()}
    authors = set(git(repo, "log", "--all", "--format=%an").splitlines())
    branches = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()

    def added(*args):
        return [x[1:] for x in git(repo, *args).splitlines() if x.startswith("+") and not x.startswith("+++")]

    if template == "latest_author":
        truth = [git(repo, "log", "-1", "--format=%an").strip()]
        return truth, authors - set(truth)
    if template == "latest_message":
        truth = [git(repo, "log", "-1", "--format=%s").strip()]
        return truth, set(git(repo, "log", "--all", "--format=%s").splitlines()) - set(truth)
    named_sha = next((h for h, m in (s.split(" ", 1) for s in subjects) if f'"{m}"' in description), None)
    if template == "commit_files":
        truth = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", named_sha).split()
        return truth, files - set(truth)
    if template == "commit_author":
        truth = [git(repo, "log", "-1", "--format=%an", named_sha).strip()]
        return truth, authors - set(truth)
    if template == "commit_count":
        count = int(git(repo, "rev-list", "--count", "HEAD"))
        return [f"{count} commit"], {f"{k} commit" for k in range(1, 11) if k != count}
    if template == "other_branches":
        truth = [b for b in branches if b != "main"]
        side = POOLS.half(0 if task["metadata"]["split"] == "train" else 1)
        return truth, set(side.branches) - set(truth)
    if template == "current_branch":
        truth = [git(repo, "branch", "--show-current").strip()]
        return truth, set(branches) - set(truth)
    if template == "unstaged_file":
        truth = git(repo, "diff", "--name-only").split()
        return truth, files - set(truth)
    if template == "staged_file":
        truth = git(repo, "diff", "--cached", "--name-only").split()
        return truth, files - set(truth)
    if template == "added_line":
        return added("show", "--format=", "HEAD", "--", named_in(description, files)), set()
    if template == "staged_line":
        return added("diff", "--cached", "--", named_in(description, files)), set(added("diff"))
    raise AssertionError(f"no git truth for {template}")


def test_the_experts_answers_are_what_git_says(tmp_path):
    checked = set()
    for n, task in enumerate(t for t in tasks_of_every_template(seeds=range(2)) if not is_write(t)):
        meta = task["metadata"]
        repo = build_repository(meta["workspace"]["git"], tmp_path / str(n))
        truth, others = git_truth(task, repo)
        assert truth and sorted(truth) == sorted(meta["answer_contains"]), (task["id"], truth)
        assert others <= set(meta["answer_excludes"]), (task["id"], others - set(meta["answer_excludes"]))
        assert answer_passes(task, expert_answer(task)), task["id"]
        checked.add(meta["template"])
    assert checked == set(TEMPLATES) - WRITE_TEMPLATES


def test_write_checks_fail_on_the_untouched_repository_and_hold_after_the_experts_writes(tmp_path):
    checked = set()
    for n, task in enumerate(t for t in tasks_of_every_template(seeds=range(2)) if is_write(t)):
        meta = task["metadata"]
        repo = build_repository(meta["workspace"]["git"], tmp_path / str(n))
        assert meta["state_checks"] and not (meta["answer_contains"] or meta["answer_excludes"])
        held = [check for check in meta["state_checks"] if check_holds(repo, check)]
        assert not held, (task["id"], "holds before any work:", held)  # partial credit pays nothing for nothing
        apply_writes(repo, meta["solution"])
        failed = [check for check in meta["state_checks"] if not check_holds(repo, check)]
        assert not failed, (task["id"], failed, git(repo, "status", "--porcelain"))
        if meta["template"] == "create_branch":
            branch = meta["solution"][0]["params"]["branch_name"]
            assert git(repo, "rev-parse", branch) == git(repo, "rev-parse", "main")
        checked.add(meta["template"])
    assert checked == WRITE_TEMPLATES


# -- answer checks ------------------------------------------------------------------------------


@pytest.mark.parametrize("split", MCP_GIT.splits)
def test_answer_checks_accept_the_expert_and_reject_stuffed_or_empty_answers(split):
    for seed in range(4):
        for task in MCP_GIT.generate(split, 150, seed):
            meta = task["metadata"]
            answer = expert_answer(task)
            # no excluded string is part of the expert's answer or of a fact it must state
            check_answer_check(answer, meta["answer_contains"], meta["answer_excludes"], task["id"])
            assert answer_passes(task, answer) and answer_passes(task, answer.upper()), task["id"]
            if is_write(task):
                continue
            assert meta["answer_contains"] and meta["answer_excludes"], task["id"]
            assert not answer_passes(task, ""), task["id"]
            assert not answer_passes(task, STUFFED), task["id"]
            hedged = [f"{answer} Or maybe {wrong}." for wrong in meta["answer_excludes"]]
            assert not any(answer_passes(task, h) for h in hedged), task["id"]


def test_a_broken_answer_check_is_refused_at_generation():
    with pytest.raises(SuiteError, match="names excluded"):
        check_answer_check("It is main.", ["main"], ["mai"], "t")
    with pytest.raises(SuiteError, match="names excluded"):
        check_answer_check("It is feature/x.", ["feature/x"], ["feature"], "t")
    with pytest.raises(SuiteError, match="lacks"):
        check_answer_check("It is main.", ["dev"], [], "t")


def test_pools_are_substring_free_so_no_candidate_hides_in_another():
    groups = {
        "authors": POOLS.authors,
        "files": POOLS.files,
        "messages": POOLS.messages,
        "branches": (*POOLS.branches, "main"),
        "settings": POOLS.settings,
    }
    everything = [v.casefold() for values in groups.values() for v in values]
    assert len(everything) == len(set(everything))
    for name, values in groups.items():
        folded = [v.casefold() for v in values]
        clashes = [(a, b) for a in folded for b in folded if a != b and a in b]
        assert not clashes, (name, clashes)
    assert all(len(getattr(POOLS, f)) % 2 == 0 for f in groups)  # train and test get halves of equal size
    for message in POOLS.messages:  # a request quoting a message gives away no other fact
        assert not [
            v for values in groups.values() for v in values if v != message and v.casefold() in message.casefold()
        ]


def test_no_question_is_answered_by_its_request_or_the_system_prompt():
    for task in tasks_of_every_template(seeds=range(6), per_seed=40):
        if is_write(task):
            continue
        prompt = (task["description"] + MCP_GIT.system_prompt).casefold()
        assert not [f for f in task["metadata"]["answer_contains"] if f.casefold() in prompt], task["id"]
        assert task["metadata"]["solution"][0]["tool"] != "respond"


# -- splits, phrasings, determinism ------------------------------------------------------------


def test_train_and_test_share_no_author_message_file_branch_or_seed():
    train = [t for seed in range(3) for t in MCP_GIT.generate("train", 200, seed)]
    held = [t for split in ("test", "test-unseen") for seed in range(3) for t in MCP_GIT.generate(split, 200, seed)]
    train_entities = {e for t in train for e in t["metadata"]["entities"]}
    held_entities = {e for t in held for e in t["metadata"]["entities"]}
    assert train_entities and held_entities and not train_entities & held_entities
    recipes = {repr(t["metadata"]["workspace"]) for t in train}
    assert not recipes & {repr(t["metadata"]["workspace"]) for t in held}
    authors = {c["author"] for t in train for c in t["metadata"]["workspace"]["git"]["commits"]}
    assert len(authors) == len(POOLS.authors) // 2  # every train-side author is used, no test-side one


def test_test_and_unseen_use_phrasings_train_never_does():
    ids = {
        split: {t["metadata"]["phrasing"] for seed in range(3) for t in MCP_GIT.generate(split, 300, seed)}
        for split in MCP_GIT.splits
    }
    assert not ids["train"] & (ids["test"] | ids["test-unseen"])
    assert all(p.split("/")[1] == "train" for p in ids["train"])
    assert len(ids["train"]) == sum(len(PHRASINGS[t]["train"]) for t in SEEN_TEMPLATES)  # each frame is used
    assert len(ids["test"]) == sum(len(PHRASINGS[t]["held_out"]) for t in SEEN_TEMPLATES)
    train_texts = {frame for t in SEEN_TEMPLATES for frame in PHRASINGS[t]["train"]}
    assert not train_texts & {frame for t in PHRASINGS for frame in PHRASINGS[t]["held_out"]}


def test_roles_templates_and_splits():
    assert set(ROLES) == {"demonstrated", "held_out"} and MCP_GIT.splits == ("train", "test", "test-unseen")
    assert set(SEEN_TEMPLATES) | set(UNSEEN_TEMPLATES) == set(TEMPLATES) == set(PHRASINGS)
    assert all(set(PHRASINGS[t]) == {"held_out"} for t in UNSEEN_TEMPLATES)
    for split, templates in (("train", SEEN_TEMPLATES), ("test", SEEN_TEMPLATES), ("test-unseen", UNSEEN_TEMPLATES)):
        tasks = MCP_GIT.generate(split, 2 * len(templates), 0)
        assert sorted({t["metadata"]["template"] for t in tasks}) == sorted(templates)
        for task in tasks:
            assert task["metadata"]["role"] == MCP_GIT.role_of(task["metadata"]["template"])
            assert task["max_steps"] <= MCP_GIT.max_steps
            for call in task["metadata"]["solution"][:-1]:
                assert call["params"]["repo_path"] == "/workspace"
            assert len(task["metadata"]["workspace"]["git"]["commits"]) <= 8  # git_log lists 10 by default
    with pytest.raises(SuiteError, match="unknown split"):
        MCP_GIT.generate("train-verifier-only", 2, 0)


def test_held_out_templates_need_no_tool_the_demonstrated_ones_do_not_use():
    def tools(split):
        return {call["tool"] for task in MCP_GIT.generate(split, 100, 0) for call in task["metadata"]["solution"]}

    assert tools("test-unseen") <= tools("train")


def test_the_same_seed_gives_the_same_tasks():
    assert get_suite("mcp-git") is MCP_GIT
    for split in MCP_GIT.splits:
        assert MCP_GIT.generate(split, 30, 7) == MCP_GIT.generate(split, 30, 7)
        assert MCP_GIT.generate(split, 30, 7) != MCP_GIT.generate(split, 30, 8)
    ids = [t["id"] for split in MCP_GIT.splits for seed in range(3) for t in MCP_GIT.generate(split, 50, seed)]
    assert len(ids) == len(set(ids))


def test_tasks_pass_the_envs_metadata_validation():
    from agentsandbox.mcp.checks import check_metadata
    from agentsandbox.mcp.workspace import check_spec
    from knowlyrcore.models import TaskInfo

    for task in tasks_of_every_template(seeds=range(2)):
        info = TaskInfo.coerce(task)
        check_metadata(info.metadata, info.id)
        check_spec(info.metadata["workspace"])


# -- against the real server --------------------------------------------------------------------


def needs_live_server():
    require_mcp_server(MCP_GIT.env_kwargs["server"])


@pytest.mark.integration
class TestMCPGitSuite(SuiteConformance):
    suite = "mcp-git"
    # every demonstrated template once per split; each episode starts the server in bubblewrap
    tasks_per_split = len(SEEN_TEMPLATES)
    stuffed_answer = STUFFED
    # partial credit is the stricter mode for policies that do no work (any check that holds pays);
    # success, and so the expert's reward, is the same in both modes
    env_variants = [{"reward": "partial"}]

    def make_env(self, **overrides):
        needs_live_server()
        return super().make_env(**overrides)


@pytest.mark.integration
def test_the_system_prompt_names_exactly_the_servers_tools():
    needs_live_server()
    from agentsandbox.mcp import list_server_tools

    kwargs = MCP_GIT.env_kwargs
    listed = {
        t["name"] for t in list_server_tools(server=kwargs["server"], sandbox=kwargs["sandbox"], env=kwargs["env"])
    }
    named = set(re.findall(r"\bgit_\w+", MCP_GIT.system_prompt))
    assert named == listed
    assert "respond(message)" in MCP_GIT.system_prompt and '"/workspace"' in MCP_GIT.system_prompt
