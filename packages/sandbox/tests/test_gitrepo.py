"""``agentsandbox.mcp.gitrepo``: recipes built into real repositories with git, deterministically;
``history`` (the ground truth a suite computes without git) agreeing with what git shows; and
one-line errors for malformed or escaping recipes."""

import random
import subprocess

import pytest

from agentsandbox.mcp.gitrepo import (
    RECIPE_EXAMPLE,
    RecipeError,
    RepoPools,
    build_repository,
    clean_message,
    generate_recipe,
    history,
    validate_recipe,
)


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def commit(message, files, branch="main", author="Ada Lovelace", day=1):
    return {
        "author": author,
        "email": author.lower().replace(" ", ".") + "@example.com",
        "date": f"2024-03-{day:02d}T10:00:00+01:00",
        "message": message,
        "branch": branch,
        "files": files,
    }


RECIPE = {
    "default_branch": "main",
    "commits": [
        commit("Add parser", {"src/parser.py": "a\n", "old.txt": "old\n", "docs/deep/x.md": "x\n"}),
        commit("Start feature", {"src/parser.py": "a\nb\n"}, branch="feat/x", author="Bo Kim", day=2),
        commit("Drop old", {"old.txt": None}, day=3),
        commit("  Tidy\n\n\nbody line   \n\n", {"n.txt": "n\n"}, branch="feat/x", author="Bo Kim", day=4),
    ],
    "checkout": "feat/x",
    "staged": {"n.txt": "n\nm\n"},
    "unstaged": {"src/parser.py": "a\nb\nc\n"},
}

POOLS = RepoPools(
    authors=("Ann Lee", "Bo Kim", "Cy Day", "Di Ng", "Ed Fox", "Flo Ray"),
    files=("src/a.py", "lib/deep/b.toml", "c.cfg", "d.ini", "z/e.py", "f.py", "g.toml", "h/i.py", "j.cfg", "k.py"),
    messages=tuple(f"Change number {c}" for c in "abcdefghijklmnop"),
    branches=("feat/x", "fix/y", "dev", "exp/z"),
    settings=("ALPHA", "BETA", "GAMMA", "DELTA"),
)


def test_a_recipe_builds_the_repository_it_describes(tmp_path):
    repo = build_repository(RECIPE, tmp_path / "repo")
    assert git(repo, "branch", "--show-current") == "feat/x\n"
    log = git(repo, "log", "--all", "--reverse", "--format=%an|%ae|%ad|%s|%cn", "--date=iso-strict")
    assert log.splitlines() == [
        "Ada Lovelace|ada.lovelace@example.com|2024-03-01T10:00:00+01:00|Add parser|Ada Lovelace",
        "Bo Kim|bo.kim@example.com|2024-03-02T10:00:00+01:00|Start feature|Bo Kim",
        "Ada Lovelace|ada.lovelace@example.com|2024-03-03T10:00:00+01:00|Drop old|Ada Lovelace",
        "Bo Kim|bo.kim@example.com|2024-03-04T10:00:00+01:00|  Tidy|Bo Kim",  # leading space kept
    ]
    assert git(repo, "ls-tree", "-r", "--name-only", "main").split() == ["docs/deep/x.md", "src/parser.py"]
    assert git(repo, "show", "feat/x:src/parser.py") == "a\nb\n"  # the feature forked before "Drop old"
    assert git(repo, "show", "feat/x:old.txt") == "old\n"
    assert git(repo, "status", "--porcelain").splitlines() == ["M  n.txt", " M src/parser.py"]
    assert not (repo / ".git" / "hooks").exists()  # no init template: no sample hooks


def test_the_same_recipe_gives_the_same_hashes_and_history_predicts_them(tmp_path):
    first = build_repository(RECIPE, tmp_path / "one")
    again = build_repository(RECIPE, tmp_path / "two")
    hashes = git(first, "log", "--all", "--reverse", "--format=%H").split()
    assert hashes == git(again, "log", "--all", "--reverse", "--format=%H").split()
    assert history(RECIPE).commit_ids() == hashes
    assert git(first, "log", "-1", "--format=%B", "feat/x") == clean_message(RECIPE["commits"][3]["message"]) + "\n"


def test_the_callers_git_environment_does_not_leak_in(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Intruder\n[core]\n\thooksPath = /nonexistent\n")
    for name, value in {"HOME": str(home), "GIT_AUTHOR_NAME": "Intruder", "GIT_DIR": str(tmp_path / "x")}.items():
        monkeypatch.setenv(name, value)
    repo = build_repository(RECIPE, tmp_path / "repo")
    monkeypatch.undo()
    assert "Intruder" not in git(repo, "log", "--all", "--format=%an %cn")
    assert git(repo, "log", "--all", "--format=%H").split()[0] in history(RECIPE).commit_ids()


def test_history_agrees_with_git_on_generated_repositories(tmp_path):
    for seed in range(12):
        recipe = generate_recipe(random.Random(seed), POOLS, branches=(0, 2), staged=1, unstaged=2)
        facts = history(recipe)
        repo = build_repository(recipe, tmp_path / str(seed))
        ids = facts.commit_ids()
        assert git(repo, "branch", "--show-current").strip() == facts.head
        assert git(repo, "rev-list", "--reverse", "HEAD").split() == [ids[i] for i in facts.head_commits]
        for branch, chain in facts.branches.items():
            assert git(repo, "rev-parse", branch).strip() == ids[chain[-1]], (seed, branch)
        for i, commit in enumerate(recipe["commits"]):
            changed = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", ids[i]).split()
            assert changed == facts.changed(i), (seed, i)
            for path in changed:
                patch = git(repo, "show", "--format=", ids[i], "--", path).splitlines()
                added = [line[1:] for line in patch if line.startswith("+") and not line.startswith("+++")]
                assert added == facts.added_lines(i, path), (seed, i, path)
            assert (
                git(repo, "log", "-1", "--format=%an|%s", ids[i]).strip() == f"{commit['author']}|{commit['message']}"
            )
        assert git(repo, "diff", "--cached", "--name-only").split() == sorted(recipe["staged"])
        assert git(repo, "diff", "--name-only").split() == sorted(recipe["unstaged"])


def test_generated_recipes_keep_their_promises():
    for seed in range(200):
        rng = random.Random(seed)
        staged, unstaged = rng.randint(0, 1), rng.randint(0, 3 - 1)
        recipe = generate_recipe(rng, POOLS, staged=staged, unstaged=unstaged)
        facts = history(recipe)
        commits = recipe["commits"]
        assert 3 <= len(commits) <= 8 and len(facts.head_commits) <= 8
        assert len({c["message"] for c in commits}) == len(commits)
        assert commits[0]["author"] != commits[1]["author"]
        assert commits[-1]["branch"] == recipe["checkout"]  # HEAD is also the newest commit
        assert len(facts.head_tree) >= 3
        lines = [line for tree in facts.trees for text in tree.values() for line in text.splitlines()]
        assert all(len(facts.added_lines(i, p)) == 1 for i in range(1, len(commits)) for p in facts.changed(i))
        values = {line.split(" = ")[1] for line in lines}
        assert all(len(v) == 3 for v in values)
        touched_last = set(commits[-1]["files"])
        changes = [*recipe.get("staged", {}), *recipe.get("unstaged", {})]
        assert len(changes) == staged + unstaged
        if changes:
            assert changes[0] not in touched_last  # the first change is to a file the newest commit left alone


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.update(commits=[]), "recipe.commits: must be a non-empty list"),
        (lambda r: r.update(colour="red"), "recipe.colour: unknown field"),
        (lambda r: r["commits"][1].update(files={"../escape": "x"}), "recipe.commits[1].files['../escape']: path"),
        (
            lambda r: r["commits"][1].update(files={"/etc/passwd": "x"}),
            "recipe.commits[1].files['/etc/passwd']: absolute",
        ),
        (
            lambda r: r["commits"][2].update(files={"a/.git/config": "x"}),
            "recipe.commits[2].files['a/.git/config']: path",
        ),
        (lambda r: r["commits"][2].update(files={".GIT/hooks/x": "x"}), "'.git' component"),
        (lambda r: r["commits"][0].update(files={"a//b": "x"}), "empty, '.' or '..' component"),
        (lambda r: r["commits"][1].update(files={}), "recipe.commits[1].files: must be a non-empty object"),
        (lambda r: r["commits"][1].update(files={"a": 3}), "recipe.commits[1].files['a']: must be a string or null"),
        (lambda r: r["commits"][3].update(date="yesterday"), "recipe.commits[3].date: not an ISO 8601 date"),
        (lambda r: r["commits"][3].update(date="2024-03-01T10:00:00"), "recipe.commits[3].date: needs a UTC offset"),
        (lambda r: r["commits"][0].update(author="Eve <evil>"), "recipe.commits[0].author: must not contain '<'"),
        (lambda r: r["commits"][0].update(author=" Eve"), "recipe.commits[0].author: must not begin or end"),
        (lambda r: r["commits"][0].update(message="   "), "recipe.commits[0].message: must be a non-empty string"),
        (lambda r: r["commits"][0].update(branch="feat/x"), "recipe.commits[0].branch: the first commit"),
        (lambda r: r["commits"][1].update(branch="-f"), "recipe.commits[1].branch: not a usable branch name"),
        (lambda r: r["commits"][1].update(branch="a..b"), "recipe.commits[1].branch: not a usable branch name"),
        (lambda r: r["commits"][1].update(sha="x"), "recipe.commits[1].sha: unknown field"),
        (lambda r: r.update(checkout="nowhere"), "recipe.checkout: branch 'nowhere' has no commit"),
        (lambda r: r.update(staged={"x": None}), "recipe.staged['x']: must be a string,"),
        (lambda r: r["commits"][2].update(files={"missing.txt": None}), "deletes a file that 'main' does not have"),
    ],
)
def test_malformed_or_escaping_recipes_are_refused_with_the_field_named(tmp_path, mutate, message):
    import copy

    recipe = copy.deepcopy(RECIPE)
    mutate(recipe)
    with pytest.raises(RecipeError, match=None) as caught:
        build_repository(recipe, tmp_path / "repo")
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "repo").exists()  # refused before anything is written


def test_a_file_where_a_directory_is_needed_is_refused(tmp_path):
    first = commit("one", {"a": "file\n", "d/x": "x\n"})
    for later, error in [
        ({"commits": [first, commit("two", {"a/b": "x\n"}, day=2)]}, r"commits\[1\]\.files\['a/b'\]: 'a' is a file"),
        ({"commits": [first, commit("two", {"d": "x\n"}, day=2)]}, r"commits\[1\]\.files\['d'\]: 'd' is a directory"),
        ({"commits": [first], "unstaged": {"a/c": "x\n"}}, r"recipe\.unstaged\['a/c'\]: 'a' is a file"),
    ]:
        with pytest.raises(RecipeError, match=error):
            build_repository(later, tmp_path / "repo")
        assert not (tmp_path / "repo").exists()


def test_build_refuses_a_non_empty_destination(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(RecipeError, match="not an empty directory"):
        build_repository(RECIPE, tmp_path / "full")
    build_repository(RECIPE, tmp_path / "empty")  # a new directory is made


def test_defaults_and_the_documented_example(tmp_path):
    minimal = {"commits": [commit("one", {"a": "x\n"})]}
    spec = validate_recipe(minimal)
    assert (spec["default_branch"], spec["checkout"], spec["commits"][0]["branch"]) == ("main", "main", "main")
    repo = build_repository(RECIPE_EXAMPLE, tmp_path / "example")
    assert git(repo, "ls-tree", "-r", "--name-only", "cleanup").split() == ["src/parser.py"]
    assert git(repo, "status", "--porcelain").splitlines() == ["M  src/parser.py", "?? notes.txt"]
    assert history(RECIPE_EXAMPLE).changed(1) == ["old.txt"]


def test_clean_message_matches_git():
    assert clean_message("  Tidy\n\n\nbody   \n\n") == "  Tidy\n\nbody\n"
    assert clean_message("\n\none") == "one\n"
