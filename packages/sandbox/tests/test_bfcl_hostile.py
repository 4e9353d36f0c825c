"""Security issue #43, findings 3 and 4: hostile calls and hostile tasks on BFCL's multi-turn backends.

Finding 3: ``mkdir("d" * 20000)``, ``cp(N, N)`` (the directory then holds itself), ``find()`` got the
process OOM-killed; bfcl-eval's backends bound nothing. Finding 4: a task whose MessageAPI
``generated_ids`` takes every id of 10000-99999 made the first ``send_message`` loop for ever while
holding the process-wide run lock. Every test here runs bfcl-eval's real backends (no mocks)
through ``BFCLMultiTurnEnv``, ``Backends`` or the data loader, and failed before the bounds of
``agentsandbox.bfcl.bounds`` (none of them hangs or exhausts memory on that code either: each
stops at its first failing assertion, before any call that would).
"""

import functools
import json
import re
import shutil
import threading

import pytest
from bfcl_shared import HAVE_BFCL, RESPOND, run_python

from agentsandbox.bfcl import multi_turn
from agentsandbox.bfcl.bounds import (
    MAX_ARGUMENTS_CHARS,
    MAX_CONFIG_CHARS,
    MAX_FS_CONTENT_CHARS,
    MAX_FS_DEPTH,
    MAX_FS_NODES,
    MAX_GENERATED_IDS,
    MAX_MESSAGE_IDS,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    MAX_RESULT_CHARS,
)
from agentsandbox.bfcl.data import INSTALL_STEP, data_dir
from agentsandbox.bfcl.multi_turn import Backends, ScenarioError
from agentsandbox.bfcl.multi_turn_env import BFCLMultiTurnEnv
from knowlyrcore.testing import require


@functools.cache
def task_of(bfcl_id):
    require(HAVE_BFCL, f"BFCL's multi-turn tasks need bfcl-eval ({INSTALL_STEP}) and mpmath")
    from agentsandbox.suites.bfcl_multi_turn import BFCL_MULTI_TURN, split_of

    tasks = BFCL_MULTI_TURN.generate(split_of(bfcl_id), 10**6, 0)
    return json.dumps(next(t for t in tasks if t["metadata"]["bfcl_id"] == bfcl_id))


def fresh(bfcl_id):
    """A copy of the suite's task ``bfcl_id`` to change at will."""
    return json.loads(task_of(bfcl_id))


def call(tool, **params):
    return {"tool": tool, "params": params}


def started(bfcl_id="multi_turn_base_0"):
    """An environment reset on ``bfcl_id`` (base_0: a file system holding /workspace/document and archive)."""
    env = BFCLMultiTurnEnv()
    env.reset(task=fresh(bfcl_id))
    return env


def file_system_nodes(env, limit=10 * MAX_FS_NODES):
    """Entries of the episode's file system, each counted once per place as ``find`` lists them;
    stops counting past ``limit`` (so a cycle cannot hang the test)."""
    stack, count = [env._model.instances["GorillaFileSystem"].root], 0
    while stack and count <= limit:
        for item in stack.pop().contents.values():
            count += 1
            if hasattr(item, "contents"):
                stack.append(item)
    return count


def refused(ts, *fragments):
    """The step is an error observation that names each fragment, and the episode goes on."""
    assert ts.observation.startswith("[error] ") and not ts.done, ts.observation[:300]
    assert all(f in ts.observation for f in fragments), ts.observation[:300]
    assert len(ts.observation) <= 600
    return True


def test_the_mkdir_cp_find_attack_is_refused_and_the_file_system_stays_small():
    """The reported sequence: the long name is refused, so is copying a directory into itself, and
    ``find`` then lists a handful of entries; the episode goes on and the state stays tiny."""
    env = started()
    before = file_system_nodes(env)
    refused(env.step(call("mkdir", dir_name="d" * 20000)), f"a name of 20,000 characters; at most {MAX_NAME_CHARS}")
    assert env.step(call("mkdir", dir_name="N")).observation == "null"
    refused(env.step(call("cp", source="N", destination="N")), "cannot copy a directory, 'N', into itself")
    refused(env.step(call("mv", source="N", destination="N")), "cannot move a directory, 'N', into itself")
    for name in (".", "..", ""):  # bfcl-eval takes an entry "." for the directory itself: another way in
        refused(env.step(call("mkdir", dir_name=name)), "cannot name a new file or directory")
        refused(env.step(call("cp", source="N", destination=name)), "cannot name a new file or directory")
    found = json.loads(env.step(call("find")).observation)["matches"]
    assert "./N" in found and len(found) == before + 1 and "./N/N" not in found
    assert file_system_nodes(env) == before + 1 <= MAX_FS_NODES


def test_a_directory_cannot_be_copied_or_moved_into_its_own_subtree():
    """bfcl-eval's cp shares a copied directory's children, so a directory can sit inside a sibling:
    ``cp(CUR, Y)`` then ``mv(Y, CUR)`` puts CUR's child ``dst`` inside ``CUR/Y``; ``cp(Y, dst)`` would
    then put ``dst`` inside itself. The check goes by identity, not by name."""
    env = started()
    for action in (
        call("mkdir", dir_name="CUR"),
        call("cd", folder="CUR"),
        call("mkdir", dir_name="dst"),
        call("cd", folder=".."),
        call("cp", source="CUR", destination="Y"),
        call("mv", source="Y", destination="CUR"),
        call("cd", folder="CUR"),
    ):
        assert "error" not in env.step(action).info
    refused(env.step(call("cp", source="Y", destination="dst")), "cannot copy a directory, 'Y', into itself")
    refused(env.step(call("mv", source="Y", destination="dst")), "cannot move a directory, 'Y', into itself")
    assert json.loads(env.step(call("ls")).observation) == {"current_directory_content": ["dst", "Y"]}
    assert file_system_nodes(env) < 20


def doubling(level):
    """Calls that make ``L<level>`` hold two shared copies of ``L<level-1>``: the entries ``find``
    lists double with each level, though the memory used hardly grows."""
    previous, name = f"L{level - 1}", f"L{level}"
    return [
        ("mkdir", {"dir_name": name}),
        ("cp", {"source": previous, "destination": name}),
        ("cp", {"source": previous, "destination": "T"}),
        ("cp", {"source": "T", "destination": name}),
        ("rm", {"file_name": "T"}),
    ]


def test_copies_past_the_node_bound_end_the_episode_with_an_error_observation():
    """No single call is refused, but once the file system holds more than ``MAX_FS_NODES`` entries
    (counted as ``find`` lists them) the episode ends: an error observation, reward 0, nothing runs
    after; the process and the next episode go on."""
    env = started()
    env.step(call("mkdir", dir_name="L0"))
    ended = None
    for level in range(1, 21):  # 2**21 entries by level 20
        for tool, params in doubling(level):
            within = file_system_nodes(env)
            ts = env.step(call(tool, **params))
            if ts.done:
                ended = ts
                break
            assert "error" not in ts.info, ts.observation
        if ended:
            break
    assert ended is not None, "the file system grew past every bound and the episode went on"
    assert within <= MAX_FS_NODES < file_system_nodes(env) <= 2 * MAX_FS_NODES + 10
    assert ended.observation.startswith("[error] cp left GorillaFileSystem past its bounds: more than 10,000 files")
    assert ended.terminated and ended.reward == 0.0
    assert ended.info["success"] is False and ended.info["exit_status"] == "error"
    assert env.step(call("find")).observation == "[error] the episode is over; call reset()"
    ts = env.reset(task=fresh("multi_turn_base_0"))  # the same environment serves the next episode
    assert json.loads(env.step(call("ls")).observation) == {"current_directory_content": ["document", "archive"]}


def test_file_content_past_its_bound_ends_the_episode():
    """Copies of one 60,000-character file: their content, counted per copy as ``cat`` and ``du``
    read it, passes ``MAX_FS_CONTENT_CHARS`` with the 69th copy, and the episode ends there."""
    env = started()
    env.step(call("touch", file_name="big"))
    assert env.step(call("echo", content="x" * 60_000, file_name="big")).observation == "null"
    for i in range(MAX_FS_CONTENT_CHARS // 60_000 - 1):  # 69 files of 60,000 characters: 4,140,000
        assert "error" not in env.step(call("cp", source="big", destination=f"c{i}")).info
    ts = env.step(call("cp", source="big", destination="last"))
    assert ts.observation == (
        f"[error] cp left GorillaFileSystem past its bounds: more than {MAX_FS_CONTENT_CHARS:,} "
        "characters of file content; the episode ends"
    )
    assert ts.terminated and ts.reward == 0.0 and ts.info["exit_status"] == "error"


def test_a_ground_truth_past_the_bounds_ends_the_episode_at_the_turns_end():
    """The ground truth is task input too: replayed at ``respond``, it is held to the same bounds."""
    task = fresh("multi_turn_base_0")
    calls = ["mkdir(dir_name='L0')"] + [
        f"{tool}({', '.join(f'{k}={v!r}' for k, v in params.items())})"
        for level in range(1, 16)
        for tool, params in doubling(level)
    ]
    metadata = task["metadata"]
    metadata["turns"], metadata["ground_truth"] = metadata["turns"][:1], [calls]
    env = BFCLMultiTurnEnv()
    env.reset(task=task)
    env.step(call("ls"))
    ts = env.step(RESPOND)
    assert ts.observation.startswith("[error] the ground truth's cp: cp left GorillaFileSystem past its bounds")
    assert ts.terminated and ts.reward == 0.0 and ts.info["exit_status"] == "error"


def test_names_paths_and_arguments_over_their_caps_are_refused():
    env = started()
    before = file_system_nodes(env)
    name = "n" * MAX_NAME_CHARS
    assert env.step(call("mkdir", dir_name=name)).observation == "null"  # at the cap: runs
    assert env.step(call("touch", file_name="f" * MAX_NAME_CHARS)).observation == "null"
    long = "x" * (MAX_NAME_CHARS + 1)
    for action in (
        call("mkdir", dir_name=long),
        call("touch", file_name=long),
        call("cp", source=name, destination=long),
        call("mv", source=name, destination=long),
        call("cat", file_name=long),
        call("find", name=long),
    ):
        refused(env.step(action), f"a name of 256 characters; at most {MAX_NAME_CHARS}")
    path = "/".join(["document"] * 200)
    refused(env.step(call("cd", folder=path)), f"a path of {len(path):,} characters; at most {MAX_PATH_CHARS:,}")
    refused(env.step(call("find", path=path)), f"a path of {len(path):,} characters")
    refused(env.step(call("echo", content="x" * MAX_ARGUMENTS_CHARS)), f"at most {MAX_ARGUMENTS_CHARS:,}")
    assert file_system_nodes(env) == before + 2


def test_a_result_over_the_cap_is_cut_with_a_marker():
    """Two 40,000-character one-line files: their ``diff`` is over 80,000 characters."""
    env = started()
    for name, letter in (("a.txt", "a"), ("b.txt", "b")):
        env.step(call("touch", file_name=name))
        assert env.step(call("echo", content=letter * 40_000, file_name=name)).observation == "null"
    ts = env.step(call("diff", file_name1="a.txt", file_name2="b.txt"))
    whole = json.dumps({"diff_lines": f"- {'a' * 40_000}\n+ {'b' * 40_000}"})
    assert ts.observation == whole[:MAX_RESULT_CHARS] + f" ... [cut: {len(whole) - MAX_RESULT_CHARS:,} more characters]"
    assert "error" not in ts.info and not ts.done
    assert len(json.loads(env.step(call("cat", file_name="a.txt")).observation)["file_content"]) == 40_000  # under it


def test_a_task_taking_every_message_id_is_refused_at_reset_naming_the_task_and_field():
    """The reported task (630 KB: every id from 10000 to 99999 taken) is refused before any backend
    sees it; a task at the cap loads and sends; a workspace holding ``MAX_MESSAGE_IDS`` ids refuses
    ``send_message`` rather than drawing ids for ever."""
    task = fresh("multi_turn_base_33")  # MessageAPI (USR002 logged in) and a file system
    task["metadata"]["initial_config"]["MessageAPI"]["generated_ids"] = list(range(10000, 100000))
    assert len(json.dumps(task)) > 630_000
    problem = (
        f"metadata.initial_config.MessageAPI.generated_ids: 90,000 ids taken; at most {MAX_GENERATED_IDS:,} "
        "(send_message draws ids from 10000-99999 until it finds one not taken)"
    )
    with pytest.raises(ValueError, match="^" + re.escape(f"BFCL multi-turn task 'bfcl-multi_turn_base_33': {problem}")):
        BFCLMultiTurnEnv().reset(task=task)
    metadata = task["metadata"]
    with pytest.raises(ScenarioError, match="^initial_config.MessageAPI.generated_ids: 90,000 ids taken"):
        Backends(metadata["involved_classes"], metadata["initial_config"], long_context=False)
    for ids in ("1, 2", [1.5], {"a": 1}):
        metadata["initial_config"]["MessageAPI"]["generated_ids"] = ids
        with pytest.raises(ValueError, match=re.escape("generated_ids: expected a list of integers")):
            BFCLMultiTurnEnv().reset(task=task)

    metadata["initial_config"]["MessageAPI"]["generated_ids"] = list(range(10000, 10000 + MAX_GENERATED_IDS))
    env = BFCLMultiTurnEnv()
    env.reset(task=task)  # at the cap: loads (bfcl-eval keeps a config's ids as a list, which cannot .add)
    env._model.instances["MessageAPI"].generated_ids = set(range(10000, 10000 + MAX_MESSAGE_IDS - 1))
    sent = json.loads(env.step(call("send_message", receiver_id="USR003", message="hi")).observation)
    assert sent["sent_status"] is True and len(env._model.instances["MessageAPI"].generated_ids) == MAX_MESSAGE_IDS
    refused(
        env.step(call("send_message", receiver_id="USR003", message="hi")),
        f"10,000 message ids are taken; at most {MAX_MESSAGE_IDS:,}",
    )


def directory(depth, leaf=None):
    """A config directory nested ``depth`` levels deep (``leaf``: the innermost contents)."""
    node = {"type": "directory", "contents": leaf or {}}
    for _ in range(depth - 1):
        node = {"type": "directory", "contents": {"d": node}}
    return node


FILES = "initial_config.GorillaFileSystem.root"


@pytest.mark.parametrize(
    ("root", "field", "problem"),
    [
        ({"x" * 300: directory(1)}, f"{FILES}.{'x' * 37}...", "a name of 300 characters; at most 255"),
        ({"w": {"type": "directory", "contents": {".": directory(1)}}}, f"{FILES}.w..", "'.' cannot name a file"),
        ({"w": {"type": "directory", "contents": {"a/b": directory(1)}}}, f"{FILES}.w.a/b", "a name cannot hold '/'"),
        (
            {"w": directory(MAX_FS_DEPTH + 2)},
            FILES + ".w" + ".d" * (MAX_FS_DEPTH + 1),
            "directories nested more than 32 deep",
        ),
        (
            {"w": directory(1, {f"f{i}": {"type": "file", "content": ""} for i in range(MAX_FS_NODES)})},
            FILES,
            "more than 10,000 files and directories",
        ),
        (
            {"w": directory(1, {"f": {"type": "file", "content": "x" * MAX_CONFIG_CHARS}})},
            "initial_config",
            f"more than {MAX_CONFIG_CHARS:,} characters of JSON",
        ),
    ],
)
def test_file_system_configs_past_the_bounds_are_refused_at_reset(root, field, problem):
    task = fresh("multi_turn_base_0")
    task["metadata"]["initial_config"]["GorillaFileSystem"] = {"root": root}
    where = f"BFCL multi-turn task 'bfcl-multi_turn_base_0': metadata.{field}: "
    with pytest.raises(ValueError, match="^" + re.escape(where + problem)):
        BFCLMultiTurnEnv().reset(task=task)


def test_the_loader_refuses_a_task_past_the_bounds_in_one_line(tmp_path):
    """``load_multi_turn`` (so the ``bfcl-multi-turn`` suite) names the file, line, field and entry."""
    require(HAVE_BFCL, f"BFCL's multi-turn data comes with bfcl-eval: {INSTALL_STEP}")
    data = tmp_path / "bfcl_eval" / "data"
    (data / "possible_answer").mkdir(parents=True)
    shutil.copytree(str(data_dir() / "multi_turn_func_doc"), data / "multi_turn_func_doc")  # the real documents
    (tmp_path / "bfcl_eval" / "__init__.py").write_text("")
    message = {"role": "user", "content": "Send Bob a note."}
    entry = {
        "id": "multi_turn_base_0",
        "question": [[message]],
        "involved_classes": ["MessageAPI"],
        "initial_config": {"MessageAPI": {"generated_ids": list(range(10000, 100000))}},
    }
    deep = {
        **entry,
        "id": "multi_turn_miss_func_0",
        "involved_classes": ["GorillaFileSystem"],
        "initial_config": {"GorillaFileSystem": {"root": {"w": directory(MAX_FS_DEPTH + 2)}}},
    }
    for category, record in (("base", entry), ("miss_func", deep)):
        (data / f"BFCL_v4_multi_turn_{category}.json").write_text(json.dumps(record) + "\n")
        answer = {"id": record["id"], "ground_truth": [["ls()"]]}
        (data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json").write_text(json.dumps(answer) + "\n")
    lines = run_python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})  # this bfcl_eval's data, not the installed one's
        from agentsandbox.bfcl import multi_turn
        for category in ("multi_turn_base", "multi_turn_miss_func"):
            try:
                multi_turn.load_multi_turn(category)
            except Exception as exc:
                print(type(exc).__name__, "|", str(exc).replace({str(data)!r}, "DATA"))
    """)
    assert lines == [
        "DataFormatError | DATA/BFCL_v4_multi_turn_base.json:1: initial_config.MessageAPI.generated_ids: 90,000 "
        "ids taken; at most 1,000 (send_message draws ids from 10000-99999 until it finds one not taken) "
        "(entry 'multi_turn_base_0')",
        "DataFormatError | DATA/BFCL_v4_multi_turn_miss_func.json:1: initial_config.GorillaFileSystem.root.w"
        + ".d" * (MAX_FS_DEPTH + 1)
        + ": directories nested more than 32 deep (entry 'multi_turn_miss_func_0')",
    ]


def test_only_math_calls_take_the_run_lock():
    """A file system call completes while the run lock is held elsewhere (before: it waited, and so
    did every episode behind a call that never returned); MathAPI's calls still take it, since
    mpmath's precision is process-wide. The joins' timeouts only guard against a hang."""
    env = started("multi_turn_base_31")  # a file system and MathAPI
    results = {}

    def step(key, action):
        results[key] = env.step(action)

    with multi_turn._RUN_LOCK:
        files = threading.Thread(target=step, args=("ls", call("ls")))
        files.start()
        files.join(timeout=60)
        done_while_locked = not files.is_alive()
        math = threading.Thread(target=step, args=("math", call("add", a=1, b=2)))
        math.start()
        math.join(timeout=0.2)
        math_waited = math.is_alive()  # it cannot finish while this thread holds the lock
    files.join(timeout=60)
    math.join(timeout=60)
    assert done_while_locked, "a GorillaFileSystem call waited for the run lock"
    assert math_waited, "a MathAPI call ran without the run lock"
    assert "current_directory_content" in results["ls"].observation
    assert json.loads(results["math"].observation) == {"result": 3}
