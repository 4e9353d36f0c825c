"""Git repositories from recipes: built deterministically, and generated from entity pools.

A task of the ``mcp-git`` suite declares its repository as a recipe (``{"workspace": {"git":
recipe}}``, the shape is in ``RECIPE_EXAMPLE``) rather than shipping one: a recipe is a few lines
of JSON in the task file, and ``build_repository`` turns it into the same repository, down to the
commit hashes, on any machine. Determinism comes from giving git nothing of the host: a fresh
environment (no ``GIT_*`` variable of the caller leaks in), ``HOME`` and ``XDG_CONFIG_HOME`` in an
empty temporary directory, ``GIT_CONFIG_NOSYSTEM``, no init template (so no sample hooks), author
and committer and both dates from the recipe, ``commit.gpgsign`` off.

A recipe comes from a task file, so it is validated before git runs, with one-line errors naming
the field (``recipe.commits[3].files: ...``), and every path it writes must stay inside the
repository: no absolute path, no ``..``, no ``.git`` component.

``history(recipe)`` computes what the built repository will show (each branch's commits, each
commit's tree, the changed files, the added lines) without running git, so a suite derives
ground truth from the recipe alone; the tests check it against the built repository.
``generate_recipe(rng, pools, ...)`` draws a small repository from a ``RepoPools``: a main branch
and up to two feature branches forked from it, 2-3 authors, files of ``NAME = value`` lines where
every commit appends one line per file it touches, and optional staged and unstaged changes.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import random
import re
import subprocess
import tempfile
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from knowlyrcore.errors import InputError

RECIPE_EXAMPLE: dict[str, Any] = {
    "default_branch": "main",
    "commits": [
        {
            "author": "Ada Lovelace",
            "email": "ada@example.com",
            "date": "2024-03-01T10:00:00+00:00",
            "message": "Add parser",
            "branch": "main",
            "files": {"src/parser.py": "def parse(text):\n    return text.split()\n", "old.txt": "old\n"},
        },
        {
            "author": "Grace Hopper",
            "email": "grace@example.com",
            "date": "2024-03-02T09:30:00+01:00",
            "message": "Drop old.txt",
            "branch": "cleanup",  # a new branch starts at the default branch's current tip
            "files": {"old.txt": None},  # None deletes the file
        },
    ],
    "checkout": "main",  # checked out at the end
    "staged": {"src/parser.py": "def parse(text):\n    return text.split(',')\n"},  # written and added
    "unstaged": {"notes.txt": "draft\n"},  # written, not added
}
_RECIPE_FIELDS = {"default_branch", "commits", "checkout", "staged", "unstaged"}
_COMMIT_FIELDS = {"author", "email", "date", "message", "branch", "files"}
# refs git accepts, narrowed: no "..", "@{", control characters, spaces, or a leading "-"
_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*")
GIT_TIMEOUT = 60.0


class RecipeError(InputError, ValueError):
    """A git recipe is malformed, names a path outside the repository, or git refused it."""


def _fail(where: str, problem: str) -> RecipeError:
    return RecipeError(f"{where}: {problem}")


def _text(value: Any, where: str, *, forbid: str = "") -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"must be a non-empty string, got {value!r}")
    bad = [c for c in forbid + "\0" if c in value]
    if bad:
        raise _fail(where, f"must not contain {bad[0]!r}: {value!r}")
    return value


# what git trims from the ends of a name or email (ident.c's crud()), so a recipe may not end in it
_CRUD = set(".,:;<>\"\\'") | {chr(c) for c in range(33)}


def _ident(value: Any, where: str) -> str:
    text = _text(value, where, forbid="<>\n")
    if text[0] in _CRUD or text[-1] in _CRUD:
        raise _fail(where, f"must not begin or end with a space or one of .,:;\"'\\ (git would trim it): {text!r}")
    return text


def _branch(value: Any, where: str) -> str:
    name = _text(value, where)
    if (
        not _BRANCH.fullmatch(name)
        or ".." in name
        or "//" in name
        or name.endswith(("/", ".", ".lock"))
        or "/." in name
    ):
        raise _fail(where, f"not a usable branch name: {name!r}")
    return name


def check_path(path: Any, where: str) -> str:
    """``path`` if it is a relative path inside the repository, else a ``RecipeError``."""
    name = _text(path, where, forbid="\\")
    parts = name.split("/")
    if name.startswith("/"):
        raise _fail(where, f"absolute path {name!r}")
    if any(part in ("", ".", "..") for part in parts):
        raise _fail(where, f"path {name!r} has an empty, '.' or '..' component")
    if any(part.casefold() == ".git" for part in parts):
        raise _fail(where, f"path {name!r} has a '.git' component")
    return name


def _files(value: Any, where: str, *, deletes: bool) -> dict[str, str | None]:
    if not isinstance(value, dict) or not value:
        raise _fail(where, f"must be a non-empty object of path: text, got {value!r}")
    for path, text in value.items():
        check_path(path, f"{where}[{path!r}]")
        if not (isinstance(text, str) or (deletes and text is None)):
            kind = "a string or null (delete)" if deletes else "a string"
            raise _fail(f"{where}[{path!r}]", f"must be {kind}, got {type(text).__name__}")
    return value


def _date(value: Any, where: str) -> str:
    """The ``"<epoch> <+hhmm>"`` form git reads without guessing (from an ISO 8601 date with an offset)."""
    text = _text(value, where)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _fail(where, f"not an ISO 8601 date: {text!r}") from None
    if moment.tzinfo is None:
        raise _fail(where, f"needs a UTC offset (e.g. +00:00): {text!r}")
    return f"{int(moment.timestamp())} {moment.strftime('%z')}"


def validate_recipe(recipe: Any) -> dict[str, Any]:
    """``recipe`` with defaults filled in (``default_branch`` "main", each commit's ``branch``, ``checkout``),
    or a ``RecipeError`` naming the first bad field."""
    if not isinstance(recipe, dict):
        raise _fail("recipe", f"must be an object, got {type(recipe).__name__}")
    unknown = sorted(set(recipe) - _RECIPE_FIELDS)
    if unknown:
        raise _fail(f"recipe.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_RECIPE_FIELDS))})")
    default = _branch(recipe.get("default_branch", "main"), "recipe.default_branch")
    commits = recipe.get("commits")
    if not isinstance(commits, list) or not commits:
        raise _fail("recipe.commits", "must be a non-empty list")
    checked, branches = [], {default}
    for i, commit in enumerate(commits):
        where = f"recipe.commits[{i}]"
        if not isinstance(commit, dict):
            raise _fail(where, f"must be an object, got {type(commit).__name__}")
        unknown = sorted(set(commit) - _COMMIT_FIELDS)
        if unknown:
            raise _fail(f"{where}.{unknown[0]}", f"unknown field (known: {', '.join(sorted(_COMMIT_FIELDS))})")
        branch = _branch(commit.get("branch", default), f"{where}.branch")
        if i == 0 and branch != default:
            raise _fail(f"{where}.branch", f"the first commit must be on the default branch {default!r}")
        branches.add(branch)
        _date(commit.get("date"), f"{where}.date")
        checked.append(
            {
                "author": _ident(commit.get("author"), f"{where}.author"),
                "email": _ident(commit.get("email"), f"{where}.email"),
                "date": commit["date"],
                "message": _text(commit.get("message"), f"{where}.message"),
                "branch": branch,
                "files": _files(commit.get("files"), f"{where}.files", deletes=True),
            }
        )
    checkout = _branch(recipe.get("checkout", default), "recipe.checkout")
    if checkout not in branches:
        raise _fail("recipe.checkout", f"branch {checkout!r} has no commit (branches: {', '.join(sorted(branches))})")
    out = {"default_branch": default, "commits": checked, "checkout": checkout}
    for name in ("staged", "unstaged"):
        if recipe.get(name) is not None:
            out[name] = _files(recipe[name], f"recipe.{name}", deletes=False)
    return out


@dataclass
class History:
    """What a recipe's repository shows, computed without git.

    ``trees[i]`` is the tree after commit ``i`` (path -> text), ``parents[i]`` its parent commit
    (None for the root), ``branches`` each branch's commits from the root to its tip, ``head``
    the checked-out branch."""

    recipe: dict[str, Any]
    trees: list[dict[str, str]] = field(default_factory=list)
    parents: list[int | None] = field(default_factory=list)
    branches: dict[str, list[int]] = field(default_factory=dict)
    head: str = ""

    @property
    def commits(self) -> list[dict[str, Any]]:
        return self.recipe["commits"]

    @property
    def head_commits(self) -> list[int]:
        """The commits reachable from HEAD, oldest first (``git log`` lists them newest first)."""
        return self.branches[self.head]

    def tree_before(self, i: int) -> dict[str, str]:
        parent = self.parents[i]
        return {} if parent is None else self.trees[parent]

    def changed(self, i: int) -> list[str]:
        """The paths commit ``i`` added, changed or deleted, sorted as git lists them."""
        before, after = self.tree_before(i), self.trees[i]
        return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))

    def added_lines(self, i: int, path: str) -> list[str]:
        """The lines commit ``i`` added to ``path`` (its diff's ``+`` lines)."""
        return added_lines(self.tree_before(i).get(path, ""), self.trees[i].get(path, ""))

    @property
    def head_tree(self) -> dict[str, str]:
        return self.trees[self.head_commits[-1]]

    def commit_ids(self) -> list[str]:
        """Each commit's hash, as ``build_repository`` makes it (git's object format, hashed here)."""
        ids: list[str] = []
        for i, commit in enumerate(self.commits):
            person = f"{commit['author']} <{commit['email']}> {_date(commit['date'], 'date')}"
            parent = "" if self.parents[i] is None else f"parent {ids[self.parents[i]]}\n"
            body = f"tree {_tree_id(self.trees[i]).hex()}\n{parent}author {person}\ncommitter {person}\n\n"
            ids.append(_object_id("commit", (body + clean_message(commit["message"])).encode()).hex())
        return ids


def _object_id(kind: str, data: bytes) -> bytes:
    return hashlib.sha1(b"%s %d\0" % (kind.encode(), len(data)) + data).digest()


def _tree_id(files: dict[str, str]) -> bytes:
    """The id of the tree holding ``files`` (path -> text, every file mode 100644)."""
    entries: dict[str, Any] = {}
    for path, text in files.items():
        *dirs, name = path.split("/")
        node = entries
        for part in dirs:
            node = node.setdefault(part, {})
        node[name] = text
    return _nested_tree_id(entries)


def _nested_tree_id(node: dict[str, Any]) -> bytes:
    rows = []
    for name, child in node.items():
        if isinstance(child, dict):
            rows.append(((name + "/").encode(), b"40000 " + name.encode() + b"\0" + _nested_tree_id(child)))
        else:
            rows.append((name.encode(), b"100644 " + name.encode() + b"\0" + _object_id("blob", child.encode())))
    return _object_id("tree", b"".join(row for _, row in sorted(rows)))


def clean_message(message: str) -> str:
    """``message`` as ``git commit --cleanup=whitespace`` stores it: trailing space of each line and
    leading and trailing blank lines dropped, runs of blank lines made one, a final newline."""
    lines, blank = [], False
    for line in message.split("\n"):
        line = line.rstrip(" \t\n\v\f\r")
        if line:
            if blank and lines:
                lines.append("")
            lines.append(line)
        blank = not line
    return "\n".join(lines) + "\n"


def added_lines(old: str, new: str) -> list[str]:
    """The lines a diff from ``old`` to ``new`` adds."""
    diff = difflib.ndiff(old.splitlines(), new.splitlines())
    return [line[2:] for line in diff if line.startswith("+ ")]


def history(recipe: Any) -> History:
    """The branches, trees and parents of ``recipe``'s repository (validated first)."""
    found = History(validate_recipe(recipe))
    default = found.recipe["default_branch"]
    for i, commit in enumerate(found.commits):
        branch = commit["branch"]
        if branch not in found.branches:  # new: starts at the default branch's tip
            found.branches[branch] = list(found.branches.get(default, []))
        chain = found.branches[branch]
        tree = dict(found.trees[chain[-1]]) if chain else {}
        for path, text in commit["files"].items():
            if text is None:
                if path not in tree:
                    raise _fail(f"recipe.commits[{i}].files[{path!r}]", f"deletes a file that {branch!r} does not have")
                del tree[path]
            else:
                _refuse_clash(tree, path, f"recipe.commits[{i}].files[{path!r}]")
                tree[path] = text
        found.parents.append(chain[-1] if chain else None)
        found.trees.append(tree)
        chain.append(i)
    found.head = found.recipe["checkout"]
    for name in ("staged", "unstaged"):
        for path in found.recipe.get(name, {}):
            _refuse_clash(found.head_tree, path, f"recipe.{name}[{path!r}]")
    return found


def _refuse_clash(tree: dict[str, str], path: str, where: str) -> None:
    """Refuse a file ``path`` where ``tree`` has a file on its way, or files beneath it."""
    parts = path.split("/")
    blocking = next((d for d in ("/".join(parts[:k]) for k in range(1, len(parts))) if d in tree), None)
    if blocking:
        raise _fail(where, f"{blocking!r} is a file, not a directory")
    if any(other.startswith(path + "/") for other in tree):
        raise _fail(where, f"{path!r} is a directory with files in it")


def _git_env(home: str, commit: dict[str, Any] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_LITERAL_PATHSPECS": "1",  # a path like "*.py" names that file, not a pattern
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "TZ": "UTC",
    }
    if commit is not None:
        date = _date(commit["date"], "date")
        for role in ("AUTHOR", "COMMITTER"):
            env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = commit["author"], commit["email"]
            env[f"GIT_{role}_DATE"] = date
    return env


def _write(root: Path, files: dict[str, str | None], where: str) -> None:
    for path, text in files.items():
        target = root / path
        try:
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(text.encode())
        except OSError as exc:
            raise _fail(
                f"{where}[{path!r}]", f"cannot {'delete' if text is None else 'write'}: {exc.strerror}"
            ) from None


def build_repository(recipe: Any, dest: str | os.PathLike[str]) -> Path:
    """Build ``recipe``'s repository at ``dest`` (a new or empty directory) and return its path.

    The same recipe gives the same repository, commit hashes included, on any machine.
    """
    facts = history(recipe)  # validates, and refuses deleting a file a branch does not have
    spec = facts.recipe
    root = Path(dest)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise RecipeError(f"{root}: not an empty directory; a repository is built in a new one")
    root.mkdir(parents=True, exist_ok=True)
    default = spec["default_branch"]
    with tempfile.TemporaryDirectory(prefix="knowlyr-git-home-") as home:

        def git(where: str, *args: str, commit: dict[str, Any] | None = None) -> None:
            argv = ["git", "-c", f"init.defaultBranch={default}", "-c", "commit.gpgsign=false", *args]
            try:
                done = subprocess.run(
                    argv, cwd=root, env=_git_env(home, commit), capture_output=True, text=True, timeout=GIT_TIMEOUT
                )
            except subprocess.TimeoutExpired:
                raise _fail(where, f"git {args[0]} took over {GIT_TIMEOUT:g}s") from None
            if done.returncode != 0:
                why = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
                raise _fail(where, f"git {args[0]} failed: {why}")

        git("recipe", "init", "-q", "--template=", ".")
        current, made = default, {default}
        for i, commit in enumerate(spec["commits"]):
            where = f"recipe.commits[{i}]"
            if commit["branch"] != current:
                start = [commit["branch"]] if commit["branch"] in made else ["-b", commit["branch"], default]
                git(f"{where}.branch", "checkout", "-q", *start)
                current = commit["branch"]
                made.add(current)
            _write(root, commit["files"], f"{where}.files")
            git(f"{where}.files", "add", "-A", "--", *commit["files"])
            git(
                where,
                "commit",
                "-q",
                "--allow-empty",
                "--no-verify",
                "--cleanup=whitespace",
                "-m",
                commit["message"],
                commit=commit,
            )
        if spec["checkout"] != current:
            git("recipe.checkout", "checkout", "-q", spec["checkout"])
        if "staged" in spec:
            _write(root, spec["staged"], "recipe.staged")
            git("recipe.staged", "add", "--", *spec["staged"])
        if "unstaged" in spec:
            _write(root, spec["unstaged"], "recipe.unstaged")
    return root


# -- generated repositories ---------------------------------------------------------------------


@dataclass(frozen=True)
class RepoPools:
    """What generated repositories are made of: author names (emails are derived), file paths,
    commit messages, branch names other than the default, and setting names (the ``NAME`` of a
    file's ``NAME = value`` lines). ``half(side)`` keeps every other entry, so two sides share none.
    """

    authors: tuple[str, ...]
    files: tuple[str, ...]
    messages: tuple[str, ...]
    branches: tuple[str, ...]
    settings: tuple[str, ...]

    def half(self, side: int) -> RepoPools:
        return RepoPools(**{f.name: getattr(self, f.name)[side::2] for f in fields(self)})


def email_of(author: str) -> str:
    """``"Ada Lovelace"`` -> ``"ada.lovelace@example.com"``."""
    return author.lower().replace(" ", ".") + "@example.com"


def _schedule(rng: random.Random, count: int, features: list[str], checkout: str, default: str) -> list[str]:
    """The branch of each of ``count`` commits: the first on ``default``, every feature branch at
    least once, the last on ``checkout`` (so HEAD is also the newest commit)."""
    middle = features + [rng.choice([default, *features]) for _ in range(count - 2 - len(features))]
    rng.shuffle(middle)
    return [default, *middle, checkout]


def generate_recipe(
    rng: random.Random,
    pools: RepoPools,
    *,
    commits: tuple[int, int] = (3, 8),
    branches: tuple[int, int] = (0, 2),
    staged: int = 0,
    unstaged: int = 0,
) -> dict[str, Any]:
    """A small repository drawn from ``pools``.

    A ``main`` branch whose first commit creates three files, and ``branches`` (min, max) feature
    branches forked from main; ``commits`` (min, max) commits in all, each by one of 2-3 authors
    (the first two by different ones), with distinct messages, one hour to two days apart. A
    commit touches one or two files, appending one ``NAME = value`` line to each (values are
    distinct 3-digit numbers, so no line is part of another), and sometimes creates a file. The
    newest commit is on the checked-out branch. ``staged`` files (then ``unstaged`` ones) of
    HEAD's tree get one more line each, files the newest commit did not touch first.
    """
    count = rng.randint(*commits)
    features = rng.sample(pools.branches, min(rng.randint(*branches), count - 2))
    default = "main"
    checkout = rng.choice([default, *features])
    authors = rng.sample(pools.authors, rng.randint(2, 3))
    paths = rng.sample(pools.files, 5)
    values = iter(rng.sample(range(100, 1000), 40))

    def line() -> str:
        return f"{rng.choice(pools.settings)} = {next(values)}\n"

    moment = datetime(2024, 1, 1, 9, tzinfo=timezone.utc) + timedelta(days=rng.randrange(365))
    messages = rng.sample(pools.messages, count)
    trees: dict[str, dict[str, str]] = {default: {}}
    recipe_commits = []
    for i, branch in enumerate(_schedule(rng, count, features, checkout, default)):
        if branch not in trees:
            trees[branch] = dict(trees[default])
        tree = trees[branch]
        if i == 0:
            files = {path: line() for path in paths[:3]}
        else:
            touched = rng.sample(sorted(tree), rng.randint(1, 2))
            new = [p for p in paths if p not in tree]
            if new and rng.random() < 0.3:
                touched[-1] = new[0]
            files = {path: tree.get(path, "") + line() for path in touched}
        tree.update(files)
        moment += timedelta(minutes=rng.randint(60, 48 * 60))
        author = authors[i] if i < 2 else rng.choice(authors)
        recipe_commits.append(
            {
                "author": author,
                "email": email_of(author),
                "date": moment.isoformat(),
                "message": messages[i],
                "branch": branch,
                "files": files,
            }
        )
    recipe: dict[str, Any] = {"default_branch": default, "commits": recipe_commits, "checkout": checkout}
    head = trees[checkout]
    last = set(recipe_commits[-1]["files"])
    order = sorted(head)
    rng.shuffle(order)
    order.sort(key=lambda path: path in last)  # stable: untouched by the newest commit first
    if staged:
        recipe["staged"] = {path: head[path] + line() for path in order[:staged]}
    if unstaged:
        recipe["unstaged"] = {path: head[path] + line() for path in order[staged : staged + unstaged]}
    return recipe
