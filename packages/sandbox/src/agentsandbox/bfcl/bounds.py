"""Bounds on what BFCL's multi-turn backends are given and what they may hold (security issue #43).

bfcl-eval's backends (``GorillaFileSystem``, ``MessageAPI``, ...) put no bound of their own on
size, time or memory, and both a policy's calls and a task's ``initial_config`` are untrusted
input. Three small calls, ``mkdir("d" * 20000)``, ``cp(N, N)`` (the directory now holds itself)
and ``find()``, got a process OOM-killed in a 2 GiB cgroup; a task whose MessageAPI
``generated_ids`` marks every id of 10000-99999 as taken made the first ``send_message`` loop
for ever. So every call and every config passes through this module:

* before a call runs (``call_problem``, ``instance_problem``; a refusal is an error observation and
  the episode goes on): a call's arguments are at most ``MAX_ARGUMENTS_CHARS`` of JSON; a file or
  directory name at most ``MAX_NAME_CHARS``, and ``""``, ``.`` and ``..`` never name a new entry; a
  path argument at most ``MAX_PATH_CHARS``; ``cp``/``mv`` of a directory into itself or its own
  subtree is refused (the cause of the cycle, which bfcl-eval's ``cp`` does not check: it tests
  ``"N/N" in contents``, which never holds); ``send_message`` is refused once ``MAX_MESSAGE_IDS``
  ids are taken (its id draw loops until it finds a free one among 90,000);
* after a call (``state_problem``): the instance's state is measured with a walk that stops at the
  bound, so a cycle or an exponential number of shared copies costs no more than the bound. Over a
  bound, the backend is in a state nothing should read (the next ``find`` would list it all), so
  ``Backends`` marks itself broken and the environment ends the episode with an error observation;
* a call's result text is cut at ``MAX_RESULT_CHARS`` with a marker saying how much was cut
  (``capped``);
* a task's ``initial_config`` is checked before any backend sees it (``config_problem``: its size,
  nesting, MessageAPI's ``generated_ids``, the file system's names, depth and size), by the data
  loader, the environment's ``reset`` and ``Backends`` itself; the loaded state must then be within
  the same bounds as after a call (the long-context extras are added by the loader).

Why bounds on inputs and state rather than a timeout: a Python thread cannot be stopped, so a
watchdog thread could only notice a runaway call, never end it; ``sys.settrace`` step budgets slow
every call several-fold and do not see the work done inside one C call (``str`` operations,
``sorted``, big-integer powers, mpmath), which is exactly where the expensive work is; and a
child process per call would have to ship the backends' state (cyclic object graphs) to it and
back on every call, thousands of times per collection. Instead each call's work is made bounded
by construction: with arguments, names, paths and state within these bounds, every backend
function is linear (``sort``: n log n) in a few MiB, and the only costs that grow with an
argument's *value* rather than its size are refused before the call runs (MathAPI's precision and
integer powers: ``multi_turn._too_costly``; MessageAPI's id draw: at most ``MAX_MESSAGE_IDS`` of
90,000 ids taken, so a draw finds a free id within 1.13 tries on average, and a task's own
seeded sequence can force at most ``MAX_GENERATED_IDS`` collisions).

The bounds leave the 795 tasks of the ``bfcl-multi-turn`` suite far inside them; the largest
each needs (expert replay, long context included) is in the comment of each bound.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from agentsandbox.bfcl.checker import show_value

#: A file or directory name, as NAME_MAX on Linux file systems (the tasks' longest: 29).
MAX_NAME_CHARS = 255
#: A path argument (``cd``'s ``folder``, ``find``'s ``path``) and an entry's full path below the
#: directory a walk starts from (the tasks' longest: 64).
MAX_PATH_CHARS = 1024
#: Directories nested below the root (the tasks': 4). bfcl-eval's loader, ``find`` and ``du`` recurse per level.
MAX_FS_DEPTH = 32
#: Files and directories, each counted once for every place it appears: bfcl-eval's ``cp`` shares
#: the copied directory's children, so n copies cost little memory but ``find`` lists them n times
#: (the tasks': 126, long context included).
MAX_FS_NODES = 10_000
#: The characters of all files together, counted per place as nodes are (the tasks': 29,576).
MAX_FS_CONTENT_CHARS = 4 * 2**20
#: The characters of every entry's full path together: what ``find`` lists from the root (the tasks': 4,673).
MAX_FS_LISTING_CHARS = 2**20
#: Another class's public state: values (dict keys and items, list items, ...) (the tasks': 585) ...
MAX_STATE_ITEMS = 100_000
#: ... and the characters of its strings (the tasks': 7,029).
MAX_STATE_CHARS = 4 * 2**20
#: One call's arguments as JSON (the tasks' largest: 6,826, a ``post_tweet``).
MAX_ARGUMENTS_CHARS = 65_536
#: One call's result text; the rest is cut (the tasks' largest: 31,706, a long-context ``get_stock_info``).
MAX_RESULT_CHARS = 65_536
#: A task's ``initial_config`` as JSON (the tasks' largest: 2,571).
MAX_CONFIG_CHARS = 2**20
#: JSON nesting of an ``initial_config`` (the tasks': 11); a directory level is two, so the file
#: system's own depth bound is met first.
MAX_CONFIG_DEPTH = 2 * MAX_FS_DEPTH + 16
#: MessageAPI ids a task's config may mark as taken (of the 90,000 in 10000-99999; the tasks': none).
MAX_GENERATED_IDS = 1_000
#: MessageAPI ids taken after which ``send_message`` is refused (each one it sends takes one more).
MAX_MESSAGE_IDS = 10_000

#: GorillaFileSystem parameters that name an entry of the current directory, and those that name
#: a new one (which ``""``, ``.`` and ``..`` may not: bfcl-eval would create an entry ``.`` that its
#: ``_get_item(".")`` then takes for the directory itself, another way to copy a directory into itself).
NAME_PARAMETERS = frozenset({"dir_name", "file_name", "source", "destination", "file_name1", "file_name2", "name"})
NEW_NAMES = {"mkdir": "dir_name", "touch": "file_name", "cp": "destination", "mv": "destination"}
PATH_PARAMETERS = frozenset({"folder", "path"})


def _short(name: Any) -> str:
    """A name as a field path shows it: at most 40 characters."""
    text = str(name)
    return text if len(text) <= 40 else text[:37] + "..."


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a file or directory in a config (None when it can)."""
    if not isinstance(name, str):
        return f"expected a string name, got {type(name).__name__}"
    if len(name) > MAX_NAME_CHARS:
        return f"a name of {len(name):,} characters; at most {MAX_NAME_CHARS} (as on a real file system)"
    if name in ("", ".", ".."):
        return f"{name!r} cannot name a file or directory"
    if "/" in name:
        return "a name cannot hold '/'"
    return None


# --------------------------------------------------------------------------- the task's config


def _size_problem(value: Any, max_chars: int, max_depth: int) -> str | None:
    """Why ``value`` is too large or deep (None when it is not), by a walk that stops at the bound."""
    items = chars = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth and isinstance(item, (dict, list, tuple)):
            return f"nested deeper than {max_depth} levels"
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict):
            items += len(item)
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            items += len(item)
            stack.extend((v, depth + 1) for v in item)
        if items + chars > max_chars:
            return f"more than {max_chars:,} characters of JSON"
    return None


def config_problem(config: Any) -> tuple[str, str] | None:
    """``(field, problem)`` of the first bound a task's ``initial_config`` breaks, or None.

    Only bounds: a config of another shape is left to bfcl-eval's loader, whose error
    ``Backends`` reports.
    """
    if not isinstance(config, dict):
        return "initial_config", "expected {class name: {state}}"
    if problem := _size_problem(config, MAX_CONFIG_CHARS, MAX_CONFIG_DEPTH):
        return "initial_config", problem
    try:
        size = len(json.dumps(config, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return "initial_config", "expected JSON values (no NaN, sets or other objects)"
    if size > MAX_CONFIG_CHARS:
        return "initial_config", f"{size:,} characters of JSON; at most {MAX_CONFIG_CHARS:,}"
    messages = config.get("MessageAPI")
    if isinstance(messages, dict) and "generated_ids" in messages:
        ids, where = messages["generated_ids"], "initial_config.MessageAPI.generated_ids"
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            return where, "expected a list of integers"
        if len(ids) > MAX_GENERATED_IDS:
            return where, (
                f"{len(ids):,} ids taken; at most {MAX_GENERATED_IDS:,} (send_message draws ids from "
                "10000-99999 until it finds one not taken)"
            )
    files = config.get("GorillaFileSystem")
    if isinstance(files, dict) and isinstance(files.get("root"), dict):
        return _file_config_problem(files["root"])
    return None


def _file_config_problem(root: dict[str, Any]) -> tuple[str, str] | None:
    """The first bound a file system config breaks: its names, depth, path lengths, entries, content."""
    top = "initial_config.GorillaFileSystem.root"
    nodes = content = 0
    stack: list[tuple[dict[str, Any], int, str, int]] = [(root, 0, top, 0)]
    while stack:
        entries, depth, where, path_chars = stack.pop()
        for name, node in entries.items():
            here = f"{where}.{_short(name)}"
            if problem := name_problem(name):
                return here, problem
            nodes, length = nodes + 1, path_chars + 1 + len(name)
            if nodes > MAX_FS_NODES:
                return top, f"more than {MAX_FS_NODES:,} files and directories"
            if depth > MAX_FS_DEPTH:
                return here, f"directories nested more than {MAX_FS_DEPTH} deep"
            if length > MAX_PATH_CHARS:
                return here, f"a path of more than {MAX_PATH_CHARS:,} characters"
            if not isinstance(node, dict):
                continue  # bfcl-eval's loader says what is wrong with it
            if "content" in node:
                if not isinstance(node["content"], str):
                    return f"{here}.content", "expected a string"
                content += len(node["content"])
                if content > MAX_FS_CONTENT_CHARS:
                    return top, f"more than {MAX_FS_CONTENT_CHARS:,} characters of file content"
            if isinstance(node.get("contents"), dict):
                stack.append((node["contents"], depth + 1, here, length))
    return None


# --------------------------------------------------------------------------- before a call


def call_problem(class_name: str, function: str, params: dict[str, Any]) -> str | None:
    """Why a call is refused by its arguments alone (None when it is not); the arguments are JSON values."""
    size = len(json.dumps(params, ensure_ascii=False))
    if size > MAX_ARGUMENTS_CHARS:
        return f"arguments of {size:,} characters of JSON; at most {MAX_ARGUMENTS_CHARS:,}"
    if class_name != "GorillaFileSystem":
        return None
    for key, value in params.items():
        if not isinstance(value, str):
            continue
        if key in NAME_PARAMETERS and len(value) > MAX_NAME_CHARS:
            return f"{key}: a name of {len(value):,} characters; at most {MAX_NAME_CHARS} (as on a real file system)"
        if key in PATH_PARAMETERS and len(value) > MAX_PATH_CHARS:
            return f"{key}: a path of {len(value):,} characters; at most {MAX_PATH_CHARS:,}"
    new = NEW_NAMES.get(function)
    if new and params.get(new) in ("", ".", ".."):
        return f"{new}: {params[new]!r} cannot name a new file or directory"
    return None


def instance_problem(class_name: str, instance: Any, function: str, params: dict[str, Any]) -> str | None:
    """Why a call is refused given the backend's current state (None when it is not)."""
    if class_name == "GorillaFileSystem" and function in ("cp", "mv"):
        return _into_itself(instance, function, params.get("source"), params.get("destination"))
    if class_name == "MessageAPI" and function == "send_message":
        try:
            taken = len(instance.generated_ids)
        except (AttributeError, TypeError):
            return None
        if taken >= MAX_MESSAGE_IDS:
            return f"{taken:,} message ids are taken; at most {MAX_MESSAGE_IDS:,} messages per workspace"
    return None


def _into_itself(fs: Any, function: str, source: Any, destination: Any) -> str | None:
    """Why ``cp``/``mv`` of ``source`` to ``destination`` would put a directory into itself (None when not).

    Found by identity, not by name: bfcl-eval's ``cp`` shares children between a directory and its
    copy, so a sibling of ``source`` can also be inside it (``cp(D, Y)`` from the parent, then
    ``mv(Y, D)``: ``D/Y`` holds ``D``'s own children).
    """
    directory = sys.modules[type(fs).__module__].Directory
    here = fs._current_dir
    item = here._get_item(source) if source in here.contents else None
    target = here._get_item(destination) if destination in here.contents else None
    if not (isinstance(item, directory) and isinstance(target, directory)):
        return None
    verb = "copy" if function == "cp" else "move"
    stack, visits = [item], 0
    while stack:
        node = stack.pop()
        visits += 1
        if node is target or visits > MAX_FS_NODES:  # past the bound: refused rather than walked on
            return f"cannot {verb} a directory, {show_value(source)}, into itself or its own subtree"
        stack.extend(child for child in node.contents.values() if isinstance(child, directory))
    return None


# --------------------------------------------------------------------------- after a call


def state_problem(class_name: str, instance: Any) -> str | None:
    """Which bound the instance's state breaks (None when it breaks none); the walk stops at the bound."""
    if class_name == "MathAPI":
        return None
    if class_name == "GorillaFileSystem":
        return _file_system_problem(instance)
    return _value_problem({k: v for k, v in vars(instance).items() if not k.startswith("_")})


def _value_problem(value: Any) -> str | None:
    items = chars = 0
    stack = [value]
    while stack:
        item = stack.pop()
        items += 1
        if isinstance(item, str):
            chars += len(item)
            if chars > MAX_STATE_CHARS:
                return f"more than {MAX_STATE_CHARS:,} characters of text"
        elif isinstance(item, (dict, list, tuple, set, frozenset)):
            if items + 2 * len(item) > MAX_STATE_ITEMS:
                return f"more than {MAX_STATE_ITEMS:,} values"
            stack.extend(item.keys() if isinstance(item, dict) else item)
            if isinstance(item, dict):
                stack.extend(item.values())
        if items > MAX_STATE_ITEMS:
            return f"more than {MAX_STATE_ITEMS:,} values"
    return None


def _file_system_problem(fs: Any) -> str | None:
    """The first bound the file system breaks, walking every tree a policy can reach: the root's,
    and those of the current directory and its ancestors (``cd ..`` follows ``parent``, which after
    ``mv`` or ``rm`` may lead off the root's tree). A directory is walked once for every place it
    appears, as ``find`` does, so a cycle ends the walk at the depth bound."""
    module = sys.modules[type(fs).__module__]
    directory, file = module.Directory, module.File
    chain, node, pwd_chars = [], getattr(fs, "_current_dir", None), 0
    while node is not None:  # parents are older than their children: the chain ends
        chain.append(node)
        pwd_chars += len(node.name) + 1
        if len(chain) > MAX_FS_DEPTH + 1:
            return f"the current directory is nested more than {MAX_FS_DEPTH} deep"
        node = node.parent
    if pwd_chars > MAX_PATH_CHARS:
        return f"the current directory's path is over {MAX_PATH_CHARS:,} characters"
    nodes = content = listing = 0
    seen: set[int] = set()
    for start in (fs.root, *reversed(chain)):
        if id(start) in seen:
            continue
        seen.add(id(start))
        stack = [(start, 0, 0)]
        while stack:
            folder, depth, path_chars = stack.pop()
            for name, item in folder.contents.items():
                nodes, length = nodes + 1, path_chars + 1 + len(name)
                listing += length
                if nodes > MAX_FS_NODES:
                    return f"more than {MAX_FS_NODES:,} files and directories (each copy counted)"
                if depth >= MAX_FS_DEPTH:
                    return f"directories nested more than {MAX_FS_DEPTH} deep"
                if length > MAX_PATH_CHARS:
                    return f"a path of more than {MAX_PATH_CHARS:,} characters"
                if listing > MAX_FS_LISTING_CHARS:
                    return f"more than {MAX_FS_LISTING_CHARS:,} characters of paths in all"
                if isinstance(item, directory):
                    seen.add(id(item))
                    stack.append((item, depth + 1, length))
                elif isinstance(item, file):
                    content += len(item.content) if isinstance(item.content, str) else 1
                    if content > MAX_FS_CONTENT_CHARS:
                        return f"more than {MAX_FS_CONTENT_CHARS:,} characters of file content"
    return None


def capped(text: str) -> str:
    """``text`` cut at ``MAX_RESULT_CHARS``, with a marker saying how much was cut."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f" ... [cut: {len(text) - MAX_RESULT_CHARS:,} more characters]"
