"""The ``mcp-git`` task suite: questions and changes on a generated repository, through the real
``mcp-server-git`` (``knowlyr/mcp``).

Every task carries its own small repository as a recipe (``metadata.workspace = {"git": recipe}``,
built by ``agentsandbox.mcp.gitrepo.build_repository`` into the episode's workspace): a main branch
of 3-8 commits by 2-3 authors, up to two feature branches, files of ``NAME = value`` lines, and
sometimes staged and unstaged changes. The ground truth is computed from the recipe
(``gitrepo.history``: branches, trees, changed files, added lines, commit hashes); the tests check
it against git. A question is checked on the final answer: the fact it must state
(``answer_contains``) and every other candidate of that fact in the repository
(``answer_excludes``: the other authors, messages, files, lines, branches, counts), so an answer
that lists candidates fails. A change is checked on the repository afterwards by git commands
run in the episode's sandbox (``state_checks``), none of which holds before the change.

Templates (the expert's tool calls before ``respond`` in brackets):

================  =====================================================  ===================  ============
template          the user asks ...                                      calls                role
================  =====================================================  ===================  ============
latest_author     who authored the latest commit                         git_log              demonstrated
latest_message    the latest commit's message                            git_log              demonstrated
commit_files      which files the commit "<message>" changed             git_log, git_show    demonstrated
commit_count      how many commits the checked-out branch has            git_log              demonstrated
other_branches    which branches exist besides main                      git_branch           demonstrated
current_branch    which branch is checked out                            git_branch           demonstrated
unstaged_file     which file has unstaged changes                        git_status           demonstrated
staged_file       which file is staged                                   git_diff_staged      demonstrated
added_line        which line the latest commit added to <file>           git_show             demonstrated
stage_file        to stage <file> (another file is modified too)         git_add              demonstrated
commit_staged     to commit the staged changes with <message>            git_commit           demonstrated
create_branch     to create <branch> from main                           git_create_branch    demonstrated
stage_and_commit  to stage and commit <file> alone with <message>        git_add, git_commit  demonstrated
commit_author     who authored the commit "<message>"                    git_log              held_out
staged_line       which line the staged change adds to <file>            git_diff_staged      held_out
stage_two         to stage <file> and <file2> (a third is modified too)  git_add              held_out
================  =====================================================  ===================  ============

The held-out templates (``test-unseen``) use tools the demonstrated ones use, in new
combinations: finding a commit by its message (commit_files) and reading its author
(latest_author); reading the line a diff adds (added_line) from the staged diff (staged_file);
staging two files in one call (stage_file). A test in the suite's tests checks this.

``train`` and ``test`` repositories come from disjoint halves of every pool (authors, files,
messages, branch names, setting names) and from seed strings of their own, so no author, message,
file or branch name of one occurs in the other; ``test`` and ``test-unseen`` requests use
phrasings ``train`` never does.

The server runs in bubblewrap, where the episode's copy of the repository is ``/workspace`` (every
call passes ``repo_path="/workspace"``) and no other host path but the system's and the server's
own install is visible, so it needs no ``--repository`` of its own. Without that flag it also
starts with no repository at all, which is how the env lists its tools before the first reset.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentsandbox.mcp.gitrepo import History, RepoPools, added_lines, generate_recipe, history
from agentsandbox.suites import SPLIT_ROLES, SuiteError, TaskSuite

#: Where the server sees the episode's repository (``agentsandbox.mcp``'s ``WORKSPACE_MOUNT``).
REPO_PATH = "/workspace"
DEFAULT_BRANCH = "main"

POOLS = RepoPools(
    authors=(
        "Priya Raman",
        "Tomas Berg",
        "Keiko Sato",
        "Omar Haddad",
        "Lena Fischer",
        "Marco Rossi",
        "Nadia Okafor",
        "Jonas Lund",
        "Aisha Khan",
        "Diego Ortiz",
        "Hana Novak",
        "Victor Dubois",
        "Sofia Costa",
        "Ravi Shah",
        "Elif Demir",
        "Kofi Mensah",
        "Ingrid Larsen",
        "Mateo Reyes",
        "Yuki Tanaka",
        "Zara Quinn",
        "Felix Weber",
        "Mira Varga",
        "Arjun Singh",
        "Clara Moreau",
    ),
    files=(
        "src/parser.py",
        "src/cli.py",
        "app/settings.toml",
        "config/limits.ini",
        "lib/cache.py",
        "setup.cfg",
        "src/models/user.py",
        "docs/conf.py",
        "tools/release.cfg",
        "app/routes.py",
        "lib/storage/disk.py",
        "config/logging.ini",
        "src/server.py",
        "scripts/deploy.cfg",
        "lib/queue.py",
        "app/worker.toml",
        "src/auth/tokens.py",
        "config/database.ini",
        "lib/metrics.py",
        "tools/lint.toml",
        "src/api/views.py",
        "app/scheduler.py",
        "lib/backoff.py",
        "config/features.toml",
    ),
    messages=(
        "Add retry backoff to the HTTP client",
        "Fix off-by-one in pagination",
        "Raise the default cache lifetime",
        "Tune worker pool size for production",
        "Document the release process",
        "Handle empty config sections",
        "Lower the log verbosity",
        "Guard against missing user tokens",
        "Split the parser into two passes",
        "Bump request timeout limits",
        "Rename the metrics exporter",
        "Cap queue depth under load",
        "Add a health check route",
        "Remove the unused storage backend",
        "Speed up token validation",
        "Make the scheduler interval configurable",
        "Clean up deployment settings",
        "Correct the database pool limits",
        "Enable the flag for dark mode",
        "Simplify the argument handling",
        "Reduce memory use of the cache",
        "Allow longer session lifetimes",
        "Tighten rate limits for anonymous users",
        "Support gzip in the API responses",
        "Fix race in the job runner",
        "Add logging around retries",
        "Increase batch size for imports",
        "Drop the legacy auth fallback",
        "Warn when the disk is nearly full",
        "Refactor route registration",
        "Shorten the lint configuration",
        "Adjust thresholds after load testing",
        "Introduce a limit on upload size",
        "Sort the settings alphabetically",
        "Revert the connection pool change",
        "Explain the metrics in the docs",
        "Prepare the next minor release",
        "Update default worker settings",
        "Fix typo in feature toggles",
        "Move constants into one module",
    ),
    branches=(
        "feature/csv-export",
        "fix/login-timeout",
        "feature/dark-mode",
        "fix/null-dates",
        "refactor/storage",
        "feature/webhooks",
        "fix/flaky-tests",
        "chore/deps-update",
        "feature/search-filters",
        "fix/memory-leak",
        "experiment/async-io",
        "feature/audit-log",
        "fix/unicode-paths",
        "docs/api-guide",
        "release/spring",
        "hotfix/crash-on-start",
    ),
    settings=(
        "CACHE_TTL",
        "MAX_RETRIES",
        "POOL_SIZE",
        "BATCH_LIMIT",
        "WORKER_COUNT",
        "PAGE_WIDTH",
        "QUEUE_DEPTH",
        "TIMEOUT_MS",
        "UPLOAD_CAP",
        "RATE_WINDOW",
        "SESSION_HOURS",
        "PORT_OFFSET",
        "BUFFER_KB",
        "SHARD_TOTAL",
        "HEARTBEAT_SEC",
        "GRACE_PERIOD",
        "LOCK_WAIT",
        "CHUNK_BYTES",
        "BACKLOG_MAX",
        "IDLE_LIMIT",
        "FLUSH_EVERY",
        "SAMPLE_RATE",
        "REPLICA_COUNT",
        "MIN_FREE_MB",
    ),
)

#: Who the policy's commits are by. The server commits through GitPython, which without these asks the
#: password database for the user, and the sandbox's private uid has no entry there.
AGENT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@example.com",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@example.com",
}

SYSTEM_PROMPT = (
    "You work on a git repository through a git server's tools. The repository is at /workspace: "
    'pass repo_path "/workspace" to every tool. Use one tool per turn. When you know the answer or have '
    "made the change, finish with respond(message), stating the answer (numbers as digits).\n"
    "Tools: git_status; git_log(max_count); git_show(revision); git_diff_unstaged; git_diff_staged; "
    "git_diff(target); git_branch(branch_type: local|remote|all); git_add(files); git_reset (unstages all); "
    "git_commit(message); git_create_branch(branch_name, base_branch); git_checkout(branch_name); "
    "respond(message)."
)

SEEN_TEMPLATES = (
    "latest_author",
    "latest_message",
    "commit_files",
    "commit_count",
    "other_branches",
    "current_branch",
    "unstaged_file",
    "staged_file",
    "added_line",
    "stage_file",
    "commit_staged",
    "create_branch",
    "stage_and_commit",
)
UNSEEN_TEMPLATES = ("commit_author", "staged_line", "stage_two")
ROLES = {"demonstrated": SEEN_TEMPLATES, "held_out": UNSEEN_TEMPLATES}

# Request frames per template and side: ``train`` for train, ``held_out`` for test and test-unseen.
# Slots: {message} a commit message, {file}/{file2} paths, {branch} a new branch name.
PHRASINGS: dict[str, dict[str, list[str]]] = {
    "latest_author": {
        "train": [
            "Who authored the latest commit?",
            "Which author made the most recent commit in this repository?",
            "Tell me who wrote the newest commit on the current branch.",
        ],
        "held_out": [
            "I need the name of whoever made the last commit here.",
            "Whose commit is at the tip of the checked-out branch?",
        ],
    },
    "latest_message": {
        "train": [
            "What is the message of the latest commit?",
            "Tell me the commit message of the most recent commit.",
            "What does the newest commit on this branch say?",
        ],
        "held_out": [
            "How did its author describe the last commit?",
            "Read me the subject line of the commit HEAD points to.",
        ],
    },
    "commit_files": {
        "train": [
            'Which files did the commit "{message}" change?',
            'List the files changed by the commit with message "{message}".',
            'What files were modified in the commit "{message}"?',
        ],
        "held_out": [
            'The commit "{message}" touched which files?',
            'I need the paths that "{message}" modified.',
        ],
    },
    "commit_count": {
        "train": [
            "How many commits are on the current branch?",
            "Count the commits in the history of the checked-out branch.",
            "How many commits does this branch have?",
        ],
        "held_out": [
            "How long is the history of the branch we're on, in commits?",
            "What's the number of commits reachable from HEAD?",
        ],
    },
    "other_branches": {
        "train": [
            "Which branches exist besides main?",
            "List the local branches other than main.",
            "What branches are there apart from main?",
        ],
        "held_out": [
            "Besides the main branch, what branches does this repository have?",
            "Name every local branch that isn't main.",
        ],
    },
    "current_branch": {
        "train": [
            "Which branch is checked out?",
            "What branch am I on?",
            "Which branch is currently checked out in the repository?",
        ],
        "held_out": [
            "Tell me the name of the active branch.",
            "Which branch does HEAD point to right now?",
        ],
    },
    "unstaged_file": {
        "train": [
            "Which file has unstaged changes?",
            "Which file is modified but not staged?",
            "There are changes that are not staged yet; which file are they in?",
        ],
        "held_out": [
            "Someone edited a file without adding it to the index. Which one?",
            "Which file was changed in the working tree but not staged?",
        ],
    },
    "staged_file": {
        "train": [
            "Which file is staged for commit?",
            "Which file has staged changes?",
            "What file is in the staging area right now?",
        ],
        "held_out": [
            "What file is ready to be committed?",
            "Which file's changes were already added to the index?",
        ],
    },
    "added_line": {
        "train": [
            "What line was added to {file} in the latest commit?",
            "Which line did the most recent commit add to {file}?",
            "The latest commit changed {file}. What line did it add?",
        ],
        "held_out": [
            "The newest commit appended something to {file}; what exactly?",
            "Show me the line that HEAD's commit introduced in {file}.",
        ],
    },
    "stage_file": {
        "train": [
            "Stage {file}, and only that file.",
            "Add {file} to the staging area, nothing else.",
            "Please stage the changes in {file} (leave other files unstaged).",
        ],
        "held_out": [
            "Put the changes in {file} into the index; no other file.",
            "Get {file} ready for the next commit by staging it, leaving the rest alone.",
        ],
    },
    "commit_staged": {
        "train": [
            'Commit the staged changes with the message "{message}".',
            'Record what is staged as a commit with message "{message}".',
            'Please commit the staged changes; message: "{message}".',
        ],
        "held_out": [
            'Make a commit of the index, titled "{message}".',
            'Whatever is already staged should go into a commit described as "{message}".',
        ],
    },
    "create_branch": {
        "train": [
            "Create a branch named {branch} from main.",
            "Make a new branch {branch} starting at main.",
            "Please create the branch {branch}, based on main.",
        ],
        "held_out": [
            "I need a branch called {branch} that starts where main is.",
            "Branch off main into a new branch {branch}.",
        ],
    },
    "stage_and_commit": {
        "train": [
            'Stage {file} and commit it with the message "{message}".',
            'Add {file} and commit only that file, message "{message}".',
            'Commit the changes in {file} alone with the message "{message}".',
        ],
        "held_out": [
            'Put {file} into a new commit titled "{message}"; other files stay uncommitted.',
            'Please record just the edits to {file} as a commit described as "{message}".',
        ],
    },
    # test-unseen only
    "commit_author": {
        "held_out": [
            'Who authored the commit "{message}"?',
            'Which person made the commit with message "{message}"?',
        ],
    },
    "staged_line": {
        "held_out": [
            "What line is staged to be added to {file}?",
            "The index holds a change to {file}; which line does it add?",
        ],
    },
    "stage_two": {
        "held_out": [
            "Stage {file} and {file2}, and nothing else.",
            "Add both {file} and {file2} to the index; leave the rest unstaged.",
        ],
    },
}

COUNT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@dataclass
class _Draft:
    """One task before it is worded: its repository, the slots its request names, the expert's calls
    before ``respond``, the expert's answer and the checks."""

    recipe: dict[str, Any]
    calls: list[dict[str, Any]]
    answer: str
    slots: dict[str, str] = field(default_factory=dict)
    contains: list[str] = field(default_factory=list)
    excludes: list[str] = field(default_factory=list)
    state_checks: list[dict[str, Any]] = field(default_factory=list)


def _git(tool: str, **params: Any) -> dict[str, Any]:
    return {"tool": tool, "params": {"repo_path": REPO_PATH, **params}}


def _run(*argv: str, **expect: Any) -> dict[str, Any]:
    """A state check: ``git argv`` run in the episode's workspace, with its expected output."""
    return {"command": ["git", *argv], **expect}


def _staged_is(*paths: str) -> dict[str, Any]:
    return _run("diff", "--cached", "--name-only", equals="\n".join(sorted(paths)))


def _last_commit_is(message: str, path: str) -> list[dict[str, Any]]:
    """The newest commit has ``message`` and changes exactly ``path``."""
    return [
        _run("log", "-1", "--format=%s", equals=message),
        _run("diff-tree", "--no-commit-id", "--name-only", "-r", "--root", "HEAD", equals=path),
    ]


def _authors(facts: History, *right: str) -> list[str]:
    return [a for a in dict.fromkeys(c["author"] for c in facts.commits) if a not in right]


def _messages(facts: History, *right: str) -> list[str]:
    return [c["message"] for c in facts.commits if c["message"] not in right]


def _files(facts: History) -> list[str]:
    """Every path the repository ever had, committed, staged or not."""
    extra = [p for name in ("staged", "unstaged") for p in facts.recipe.get(name, {})]
    return sorted({p for tree in facts.trees for p in tree} | set(extra))


def _lines(facts: History) -> list[str]:
    """Every line of every file in every commit and in the staged and unstaged changes."""
    texts = [t for tree in facts.trees for t in tree.values()]
    texts += [t for name in ("staged", "unstaged") for t in facts.recipe.get(name, {}).values()]
    return sorted({line for text in texts for line in text.splitlines()})


def _new_message(rng: random.Random, pools: RepoPools, facts: History) -> str:
    return rng.choice([m for m in pools.messages if m not in {c["message"] for c in facts.commits}])


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# -- templates: (rng, pools) -> _Draft ------------------------------------------------------------


def _latest_author(rng, pools):
    facts = history(generate_recipe(rng, pools))
    author = facts.commits[facts.head_commits[-1]]["author"]
    answer = f"The latest commit was authored by {author}."
    return _Draft(facts.recipe, [_git("git_log", max_count=1)], answer, {}, [author], _authors(facts, author))


def _latest_message(rng, pools):
    facts = history(generate_recipe(rng, pools))
    message = facts.commits[facts.head_commits[-1]]["message"]
    answer = f'The latest commit\'s message is "{message}".'
    return _Draft(facts.recipe, [_git("git_log", max_count=1)], answer, {}, [message], _messages(facts, message))


def _commit_files(rng, pools):
    facts = history(generate_recipe(rng, pools))
    index = rng.choice(facts.head_commits[1:])  # not the root: it creates every file there is
    changed = facts.changed(index)
    calls = [_git("git_log"), _git("git_show", revision=facts.commit_ids()[index])]
    answer = f"That commit changed {_listing(changed)}."
    wrong = [p for p in _files(facts) if p not in changed]
    return _Draft(facts.recipe, calls, answer, {"message": facts.commits[index]["message"]}, changed, wrong)


def _commit_count(rng, pools):
    facts = history(generate_recipe(rng, pools))
    count = len(facts.head_commits)
    answer = f"There are {count} commits on {facts.head}."
    # "3 commit" also catches "3 commits"; git_log shows 10 by default and a recipe has at most 8
    wrong = [f"{form} commit" for k in range(1, 11) if k != count for form in (str(k), COUNT_WORDS[k])]
    return _Draft(facts.recipe, [_git("git_log")], answer, {}, [f"{count} commit"], wrong)


def _other_branches(rng, pools):
    facts = history(generate_recipe(rng, pools, branches=(1, 2)))
    others = sorted(b for b in facts.branches if b != DEFAULT_BRANCH)
    answer = f"Besides {DEFAULT_BRANCH}, the repository has {_listing(others)}."
    wrong = [b for b in pools.branches if b not in facts.branches]
    return _Draft(facts.recipe, [_git("git_branch", branch_type="local")], answer, {}, others, wrong)


def _current_branch(rng, pools):
    facts = history(generate_recipe(rng, pools, branches=(1, 2)))
    answer = f"The checked-out branch is {facts.head}."
    wrong = [b for b in facts.branches if b != facts.head]
    return _Draft(facts.recipe, [_git("git_branch", branch_type="local")], answer, {}, [facts.head], wrong)


def _unstaged_file(rng, pools):
    facts = history(generate_recipe(rng, pools, staged=rng.randint(0, 1), unstaged=1))
    (path,) = facts.recipe["unstaged"]
    answer = f"{path} has unstaged changes."
    return _Draft(facts.recipe, [_git("git_status")], answer, {}, [path], [p for p in _files(facts) if p != path])


def _staged_file(rng, pools):
    facts = history(generate_recipe(rng, pools, staged=1, unstaged=rng.randint(0, 1)))
    (path,) = facts.recipe["staged"]
    answer = f"{path} is staged."
    return _Draft(facts.recipe, [_git("git_diff_staged")], answer, {}, [path], [p for p in _files(facts) if p != path])


def _added_line(rng, pools):
    facts = history(generate_recipe(rng, pools))
    newest = facts.head_commits[-1]
    path = rng.choice(facts.changed(newest))
    (line,) = facts.added_lines(newest, path)
    answer = f"The latest commit added the line `{line}` to {path}."
    wrong = [x for x in _lines(facts) if x != line]
    return _Draft(facts.recipe, [_git("git_show", revision="HEAD")], answer, {"file": path}, [line], wrong)


def _staged_line(rng, pools):
    facts = history(generate_recipe(rng, pools, staged=1, unstaged=1))
    ((path, text),) = facts.recipe["staged"].items()
    (line,) = added_lines(facts.head_tree[path], text)
    answer = f"The staged change adds the line `{line}` to {path}."
    wrong = [x for x in _lines(facts) if x != line]
    return _Draft(facts.recipe, [_git("git_diff_staged")], answer, {"file": path}, [line], wrong)


def _commit_author(rng, pools):
    facts = history(generate_recipe(rng, pools))
    commit = facts.commits[rng.choice(facts.head_commits)]
    answer = f"{commit['author']} authored that commit."
    wrong = _authors(facts, commit["author"])
    return _Draft(facts.recipe, [_git("git_log")], answer, {"message": commit["message"]}, [commit["author"]], wrong)


def _stage_file(rng, pools):
    recipe = generate_recipe(rng, pools, unstaged=2)
    path = next(iter(recipe["unstaged"]))  # the other modified file must stay unstaged
    draft = _Draft(recipe, [_git("git_add", files=[path])], f"Staged {path}.", {"file": path})
    draft.state_checks = [_staged_is(path)]
    return draft


def _stage_two(rng, pools):
    recipe = generate_recipe(rng, pools, unstaged=3)
    first, second, _ = recipe["unstaged"]
    draft = _Draft(recipe, [_git("git_add", files=[first, second])], f"Staged {first} and {second}.")
    draft.slots, draft.state_checks = {"file": first, "file2": second}, [_staged_is(first, second)]
    return draft


def _commit_staged(rng, pools):
    facts = history(generate_recipe(rng, pools, staged=1, unstaged=rng.randint(0, 1)))
    (path,) = facts.recipe["staged"]  # one the newest commit did not change, so no check holds before
    message = _new_message(rng, pools, facts)
    answer = f'Committed the staged changes as "{message}".'
    draft = _Draft(facts.recipe, [_git("git_commit", message=message)], answer, {"message": message})
    draft.state_checks = [*_last_commit_is(message, path), _staged_is()]  # nothing left staged
    return draft


def _stage_and_commit(rng, pools):
    facts = history(generate_recipe(rng, pools, unstaged=2))
    path, other = facts.recipe["unstaged"]
    message = _new_message(rng, pools, facts)
    calls = [_git("git_add", files=[path]), _git("git_commit", message=message)]
    draft = _Draft(facts.recipe, calls, f'Committed {path} as "{message}".', {"file": path, "message": message})
    # the other file stays modified and unstaged ("nothing staged" would hold before the work)
    draft.state_checks = [*_last_commit_is(message, path), _run("diff", "--name-only", equals=other)]
    return draft


def _create_branch(rng, pools):
    facts = history(generate_recipe(rng, pools))
    branch = rng.choice([b for b in pools.branches if b not in facts.branches])
    base = facts.commit_ids()[facts.branches[DEFAULT_BRANCH][-1]]
    call = _git("git_create_branch", branch_name=branch, base_branch=DEFAULT_BRANCH)
    draft = _Draft(facts.recipe, [call], f"Created {branch} from {DEFAULT_BRANCH}.", {"branch": branch})
    draft.state_checks = [
        _run("branch", "--list", branch, contains=[branch]),
        _run("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", equals=base),
    ]
    return draft


Template = Callable[[random.Random, RepoPools], _Draft]
TEMPLATES: dict[str, Template] = {
    "latest_author": _latest_author,
    "latest_message": _latest_message,
    "commit_files": _commit_files,
    "commit_count": _commit_count,
    "other_branches": _other_branches,
    "current_branch": _current_branch,
    "unstaged_file": _unstaged_file,
    "staged_file": _staged_file,
    "added_line": _added_line,
    "stage_file": _stage_file,
    "commit_staged": _commit_staged,
    "create_branch": _create_branch,
    "stage_and_commit": _stage_and_commit,
    "commit_author": _commit_author,
    "staged_line": _staged_line,
    "stage_two": _stage_two,
}


def check_answer_check(answer: str, contains: list[str], excludes: list[str], where: str) -> None:
    """Refuse an answer check the expert's own answer fails, or one whose excluded strings are part
    of the answer or of a required fact (then a correct answer could never pass)."""
    text = answer.casefold()
    missing = [fact for fact in contains if fact.casefold() not in text]
    clashing = [w for w in excludes if w.casefold() in text or any(w.casefold() in f.casefold() for f in contains)]
    if missing or clashing:
        raise SuiteError(f"{where}: answer {answer!r} lacks {missing} or names excluded {clashing}")


def _phrase(template: str, split: str, rng: random.Random, slots: dict[str, str]) -> tuple[str, str]:
    """The request and its phrasing id ``template/side/index``."""
    side = "train" if split.startswith("train") else "held_out"
    frames = PHRASINGS[template][side]
    index = rng.randrange(len(frames))
    return frames[index].format(**slots), f"{template}/{side}/{index}"


def _entities(recipe: dict[str, Any], slots: dict[str, str]) -> list[str]:
    """Every author, email, message, path, branch and setting name of a task (for split-disjointness checks)."""
    found = set(slots.values())
    for commit in recipe["commits"]:
        found.update((commit["author"], commit["email"], commit["message"], commit["branch"], *commit["files"]))
    for name in ("staged", "unstaged"):
        found.update(recipe.get(name, {}))
    texts = [t for c in recipe["commits"] for t in c["files"].values() if t] + [
        t for name in ("staged", "unstaged") for t in recipe.get(name, {}).values()
    ]
    found.update(line.split(" = ")[0] for text in texts for line in text.splitlines())
    return sorted(found - {DEFAULT_BRANCH})


def generate(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` mcp-git tasks of ``split``; the same arguments always give the same tasks."""
    pools = POOLS.half(0 if split.startswith("train") else 1)
    role = SPLIT_ROLES[split]
    templates = ROLES[role]
    tasks = []
    for index in range(n):
        rng = random.Random(f"mcp-git/{split}/{seed}/{index}")
        template = templates[index % len(templates)]  # round robin: every template equally often
        draft = TEMPLATES[template](rng, pools)
        task_id = f"mcp-git-{split}-{seed}-{index:05d}"
        check_answer_check(draft.answer, draft.contains, draft.excludes, task_id)
        # worded from a stream of its own: the repository and solution do not depend on the wording
        description, phrasing = _phrase(template, split, random.Random(f"{task_id}/phrasing"), draft.slots)
        solution = [*draft.calls, {"tool": "respond", "params": {"message": draft.answer}}]
        digest = hashlib.sha256(json.dumps([description, draft.recipe], sort_keys=True).encode()).hexdigest()[:8]
        tasks.append(
            {
                "id": f"{task_id}-{digest}",
                "description": description,
                "max_steps": len(solution) + 3,
                "metadata": {
                    "suite": "mcp-git",
                    "split": split,
                    "template": template,
                    "role": role,
                    "workspace": {"git": draft.recipe},
                    "solution": solution,
                    "answer_contains": draft.contains,
                    "answer_excludes": list(dict.fromkeys(draft.excludes)),
                    "state_checks": draft.state_checks,
                    "phrasing": phrasing,
                    "entities": _entities(draft.recipe, draft.slots),
                },
            }
        )
    return tasks


MCP_GIT = TaskSuite(
    name="mcp-git",
    env_id="knowlyr/mcp",
    description="questions and changes on a generated git repository through the real mcp-server-git",
    generator=generate,
    max_steps=6,
    system_prompt=SYSTEM_PROMPT,
    env_kwargs={"server": "mcp-server-git", "sandbox": "bwrap", "env": AGENT_IDENTITY},
    roles=ROLES,
)

__all__ = ["MCP_GIT", "PHRASINGS", "POOLS", "ROLES", "SYSTEM_PROMPT", "TEMPLATES", "generate"]
