"""The ``coding`` task suite and the inline-files path of ``SandboxEnv`` it relies on.

Generation tests run every task's test script in this interpreter (fast, so they cover every
template on several seeds); the integration tests play the expert and a do-nothing policy on
real sandboxes.
"""

import ast
import contextlib
import io
import json
import sys
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
from sandbox_tasks import CALC_TASK

from agentsandbox import SandboxConfig, SandboxEnv
from agentsandbox.env import TaskFilesError
from agentsandbox.suites import SPLITS, TaskSuite, get_suite
from agentsandbox.suites.coding import (
    CODING,
    CONSTANTS,
    FAMILIES,
    NAMES,
    SEEN_TEMPLATES,
    UNSEEN_FAMILIES,
    UNSEEN_KIND,
    UNSEEN_TEMPLATES,
    generate,
    planted_bugs,
    solution_edit,
)
from agentsandbox.testing import require_backend
from knowlyrcore.models import TaskInfo

CONFIG = SandboxConfig(timeout=30)


def run_tests_in_process(files: dict[str, str]) -> tuple[int, str]:
    """Run a task's test script here (its ``main()``), with its module imported from ``files``."""
    test_path = next(path for path in files if path.startswith("test_"))
    module = test_path[len("test_") : -len(".py")]
    previous = sys.modules.get(module)
    sys.modules[module] = types.ModuleType(module)
    out = io.StringIO()
    try:
        exec(compile(files[f"{module}.py"], f"{module}.py", "exec"), sys.modules[module].__dict__)
        namespace = {"__name__": "coding_suite_check"}
        exec(compile(files[test_path], test_path, "exec"), namespace)
        with contextlib.redirect_stdout(out):
            code = namespace["main"]()
    finally:
        if previous is None:
            del sys.modules[module]
        else:
            sys.modules[module] = previous
    return code, out.getvalue()


def apply_solution(task: dict) -> dict[str, str]:
    """The task's files after the expert's edit_file (checked the way the tool checks it)."""
    files = dict(task["metadata"]["files"])
    (edit,) = [a["params"] for a in task["metadata"]["solution"] if a["tool"] == "edit_file"]
    assert files[edit["path"]].count(edit["old_str"]) == 1
    files[edit["path"]] = files[edit["path"]].replace(edit["old_str"], edit["new_str"], 1)
    return files


def flatten(pool) -> set[str]:
    return {str(v) for item in pool for v in (item if isinstance(item, tuple) else (item,))}


# -- generation ----------------------------------------------------------------------------
def test_the_suite_is_registered_for_the_sandbox_env():
    suite = get_suite("coding")
    assert suite is CODING and isinstance(suite, TaskSuite)
    assert suite.env_id == "knowlyr/sandbox"
    assert "submit" in suite.system_prompt and "edit_file(path, old_str, new_str)" in suite.system_prompt


def test_same_call_same_tasks_and_other_seeds_or_splits_differ():
    tasks = generate("test", 12, 7)
    assert tasks == CODING.generate("test", 12, seed=7)
    assert CODING.generate("test", 5, seed=7) == tasks[:5]  # task i does not depend on n
    assert tasks[7]["id"].startswith("coding-test-00007-")
    other_seed, other_split = generate("test", 12, 8), generate("train", 12, 7)
    for other in (other_seed, other_split):
        assert {t["id"] for t in other}.isdisjoint(t["id"] for t in tasks)
        assert all(a["metadata"]["files"] != b["metadata"]["files"] for a, b in zip(tasks, other))


def test_tasks_are_self_contained_json_records():
    for task in generate("train", 30, 0):
        assert json.loads(json.dumps(task)) == task
        info = TaskInfo.coerce(json.loads(json.dumps(task)))
        (test_path,) = [path for path in info.metadata["files"] if path.startswith("test_")]
        assert info.repo is None and info.test_command == f"python3 {test_path}"
        assert sorted(info.metadata["files"]) == sorted([test_path, test_path[len("test_") :]])
        assert info.max_steps == CODING.max_steps and len(info.metadata["solution"]) < info.max_steps
        assert [a["tool"] for a in info.metadata["solution"]] == ["read_file", "edit_file", "run_tests", "submit"]
        assert info.metadata["bug_kind"] == info.metadata["template"].split("/")[1]


def test_name_and_constant_pools_are_split_in_two_disjoint_halves():
    train = set().union(*(flatten(pools[0]) for pools in NAMES.values()))
    test = set().union(*(flatten(pools[1]) for pools in NAMES.values()))
    assert train.isdisjoint(test), train & test
    for role, (train_values, test_values) in CONSTANTS.items():
        assert set(train_values).isdisjoint(test_values), role


def identifiers(source: str) -> set[str]:
    """Every name a module defines, binds or reads."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.Name):
            found.add(node.id)
    return found


def test_train_shares_no_entity_id_or_identifier_with_test_splits():
    by_split = {split: generate(split, 150, 0) for split in SPLITS}
    entities = {split: set().union(*(t["metadata"]["entities"] for t in tasks)) for split, tasks in by_split.items()}
    held_out = entities["test"] | entities["test-unseen"]
    assert entities["train"].isdisjoint(held_out), entities["train"] & held_out
    ids = [t["id"] for tasks in by_split.values() for t in tasks]
    assert len(ids) == len(set(ids))
    # The names actually in the code, not only the recorded ones: no train entity is a name in
    # a test module and vice versa (a hard-coded name used on both sides would show up here).
    for split, other in (("train", held_out), ("test", entities["train"]), ("test-unseen", entities["train"])):
        for task in by_split[split]:
            module = next(source for path, source in task["metadata"]["files"].items() if not path.startswith("test_"))
            assert identifiers(module).isdisjoint(other), (task["id"], identifiers(module) & other)


def test_test_unseen_templates_never_occur_in_train():
    train = {t["metadata"]["template"] for seed in range(3) for t in generate("train", len(SEEN_TEMPLATES), seed)}
    test = {t["metadata"]["template"] for t in generate("test", len(SEEN_TEMPLATES), 1)}
    unseen = [t["metadata"] for t in generate("test-unseen", 2 * len(UNSEEN_TEMPLATES), 0)]
    assert train == test == set(SEEN_TEMPLATES)  # round robin: len(templates) tasks cover each once
    assert {m["template"] for m in unseen} == set(UNSEEN_TEMPLATES)
    assert train.isdisjoint(m["template"] for m in unseen)
    assert all(m["bug_kind"] == UNSEEN_KIND or m["family"] in UNSEEN_FAMILIES for m in unseen)
    assert len({t.split("/")[0] for t in SEEN_TEMPLATES}) >= 8
    assert {t.split("/")[1] for t in SEEN_TEMPLATES} == {"operator", "off_by_one", "wrong_constant", "missing_case"}


def test_the_bug_catalogue_covers_every_family_and_names_what_a_template_lacks():
    assert {t.split("/")[0] for t in SEEN_TEMPLATES + UNSEEN_TEMPLATES} == set(FAMILIES)
    bugs = planted_bugs("mean", f="average", xs="numbers")
    assert bugs["operator"].correct == "sum(numbers) / len" and bugs["operator"].buggy == "sum(numbers) // len"
    assert bugs["missing_case"].symptom == "average() crashes on an empty list"
    with pytest.raises(AssertionError, match=r"mean/operator uses 'xs', which mean\(\) does not pass"):
        planted_bugs("mean", f="average")


@pytest.mark.parametrize("split", SPLITS)
def test_every_bug_fails_its_tests_and_the_expert_edit_fixes_it(split):
    templates = SEEN_TEMPLATES if split != "test-unseen" else UNSEEN_TEMPLATES
    for seed in range(4):
        for task in generate(split, 2 * len(templates), seed):
            code, output = run_tests_in_process(task["metadata"]["files"])
            assert code == 1 and "FAILED test_" in output and " 0 failed" not in output, task["id"]
            code, output = run_tests_in_process(apply_solution(task))
            assert code == 0 and output.endswith(" 0 failed\n"), (task["id"], output)
            edit = task["metadata"]["solution"][1]["params"]
            for line in (edit["old_str"] + edit["new_str"]).splitlines():
                if line.strip():
                    assert line.strip() not in task["description"], (task["id"], line)


def test_solution_edit_is_the_smallest_unique_whole_line_change():
    fixed = "a = 1\nb = 2\nb = 2\nc = 3\n"
    assert solution_edit("a = 1\nb = 5\nb = 2\nc = 3\n", fixed) == ("b = 5\n", "b = 2\n")
    # a deleted line: old_str grows by the next line until it is unique and non-empty
    assert solution_edit("a = 1\nb = 2\nc = 3\n", fixed) == ("c = 3\n", "b = 2\nc = 3\n")


# -- on a real sandbox -----------------------------------------------------------------------
@pytest.fixture(params=["local", "docker"])
def backend(request):
    require_backend(request.param)
    return request.param


@pytest.fixture
def env(backend):
    env = SandboxEnv(backend, CONFIG)
    yield env
    env.close()


class SubmitAtOnce:
    """The do-nothing policy."""

    def reset(self, task=None):
        pass

    def __call__(self, observation):
        return {"tool": "submit", "params": {}}


def play(env: SandboxEnv, task: dict, policy) -> tuple[bool, int]:
    step = env.reset(task=task)
    policy.reset(task)
    for turn in range(1, task["max_steps"] + 1):
        step = env.step(policy(step.observation))
        if step.done:
            return step.info["success"], turn
    return False, task["max_steps"]


#: Sandboxes that play a split's tasks side by side, each on its share of them: one sandbox runs
#: one command at a time, waiting on the daemon or on its processes, so on 2 cores 4 of them take
#: about half the time of 1 on Docker and a third on the local backend.
SIDE_BY_SIDE = 4


@pytest.mark.integration
@pytest.mark.parametrize("split", SPLITS)
def test_expert_solves_every_task_and_doing_nothing_solves_none(backend, split):
    tasks = [json.loads(line) for line in "\n".join(json.dumps(t) for t in generate(split, 20, 0)).splitlines()]

    def check(share):
        env, expert, idle = SandboxEnv(backend, CONFIG), CODING.expert(), SubmitAtOnce()
        try:
            for task in share:
                first = env.reset(task=task)
                assert f"Tests: {task['test_command']}" in first.observation and "(2 files)" in first.observation
                run = env.step({"tool": "run_tests", "params": {}})
                assert run.info["exit_code"] == 1 and "FAILED test_" in run.observation, task["id"]
                assert play(env, task, expert) == (True, 4), task["id"]
                # The same task again restores the buggy snapshot: submitting at once fails.
                assert play(env, task, idle) == (False, 1), task["id"]
            return len(share)
        finally:
            env.close()

    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:
        checked = list(pool.map(check, [tasks[i::SIDE_BY_SIDE] for i in range(SIDE_BY_SIDE)]))
    assert sum(checked) == len(tasks) == 20


@pytest.mark.integration
def test_the_expert_patch_is_the_fix(env):
    task = generate("train", 1, 3)[0]
    env.reset(task=task)
    expert = CODING.expert()
    expert.reset(task)
    for _ in range(3):
        env.step(expert(None))
    end = env.step(expert(None))
    edit = task["metadata"]["solution"][1]["params"]
    old, new = edit["old_str"].splitlines(), edit["new_str"].splitlines()
    changed = [f"-{line}" for line in old if line not in new] + [f"+{line}" for line in new if line not in old]
    assert end.info["success"] is True and end.info["patch"].startswith("diff --git")
    assert changed and all(line in end.info["patch"].splitlines() for line in changed)


# -- SandboxEnv: tasks that carry their files --------------------------------------------------
INLINE_TASK = {
    "id": "inline",
    "description": "Make greet() say hello.",
    "test_command": "python3 -c 'from pkg.greet import greet; assert greet() == \"hello\"'",
    "metadata": {
        "files": {"pkg/__init__.py": "", "pkg/greet.py": "def greet():\n    return 'bye'\n", "notes.txt": "x"}
    },
}


@pytest.mark.integration
def test_inline_files_make_the_workspace_and_reset_reuses_their_snapshot(env):
    prepared = []
    prepare = env._prepare
    env._prepare = lambda task, files: (prepared.append(task.id), prepare(task, files))
    first = env.reset(task=INLINE_TASK)
    assert "(3 files)" in first.observation
    assert env.step({"tool": "list_files", "params": {}}).observation == "notes.txt\npkg/__init__.py\npkg/greet.py"
    assert env.step({"tool": "run_tests", "params": {}}).info["exit_code"] != 0
    env.step({"tool": "edit_file", "params": {"path": "pkg/greet.py", "old_str": "bye", "new_str": "hello"}})
    env.step({"tool": "write_file", "params": {"path": "stray.txt", "content": "left behind"}})
    assert env.step({"tool": "run_tests", "params": {}}).info["exit_code"] == 0

    env.reset(task=INLINE_TASK)  # same files: the snapshot, not a rebuild
    assert prepared == ["inline"]
    assert env.step({"tool": "list_files", "params": {}}).observation == "notes.txt\npkg/__init__.py\npkg/greet.py"
    assert "'bye'" in env.step({"tool": "read_file", "params": {"path": "pkg/greet.py"}}).observation

    changed = {"pkg/greet.py": "def greet():\n    return 'hello'\n", "pkg/__init__.py": ""}
    env.reset(task={**INLINE_TASK, "id": "inline-2", "metadata": {"files": changed}})  # other content: rebuilt
    assert prepared == ["inline", "inline-2"]
    assert env.step({"tool": "submit", "params": {}}).info["success"] is True


@pytest.mark.integration
def test_inline_files_are_written_over_a_repository(env):
    env.reset(task={**CALC_TASK, "metadata": {"files": {"docs/extra.md": "# extra\n"}}})
    listing = env.step({"tool": "list_files", "params": {}}).observation.splitlines()
    assert listing == ["calc.py", "check_calc.py", "docs/extra.md"]
    # the setup command ran after the files were written, so they are part of the initial commit
    assert env.step({"tool": "git", "params": {"subcommand": "status"}}).observation.strip().count("\n") == 0


@pytest.mark.parametrize(
    "name", ["/etc/passwd", "../escape.py", "a/../../escape.py", "a/./b.py", "a//b.py", "", "dir/", "a\\..\\b.py"]
)
def test_unsafe_inline_file_names_are_refused_before_anything_is_written(name):
    env = SandboxEnv("local", CONFIG)
    with pytest.raises(TaskFilesError, match="unsafe file name") as caught:
        env.reset(task={"id": "evil", "metadata": {"files": {"ok.py": "", name: "pwned"}}})
    assert "task 'evil'" in str(caught.value) and "relative path inside the workspace" in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert env._sandbox is None  # refused before a sandbox was even created


@pytest.mark.parametrize(
    ("files", "message"),
    [(["a.py"], "must map relative paths to file contents, got list"), ({"a.py": b"x"}, "must be text, got bytes")],
)
def test_malformed_inline_files_are_refused(files, message):
    env = SandboxEnv("local", CONFIG)
    with pytest.raises(TaskFilesError, match=message):
        env.reset(task={"metadata": {"files": files}})
    assert env._sandbox is None
