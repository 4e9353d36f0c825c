"""Tasks for any MCP server, written by a model: ``knowlyr-hub tasks mcp``.

A user who brings their own MCP server has tools but no tasks. This module lists the server's
tools (``agentsandbox.mcp.list_server_tools``, through knowlyr-hub's ``sandbox`` extra) and asks
a chat model behind any OpenAI-compatible (or Anthropic) endpoint, reached through
``knowlyrcore.endpoint.ChatEndpoint``, to write tasks for them: a request, a rubric saying how
to judge an answer, and optionally facts the answer must contain. The records are tasks of the
``knowlyr/mcp`` environment (``metadata.template == "generated"``), judged by their rubric or
checked by ``answer_contains``.

The generator is asked in batches of ``batch_size`` until ``n`` tasks are accepted or
``max_attempts`` replies were read. Its replies are untrusted: whatever a reply holds (prose,
fenced blocks, a JSON array, ``{"tasks": [...]}``, objects one per line, or garbage), at most
``MAX_REPLY_CHARS`` of it are read, JSON values are picked out of it at up to
``MAX_DECODE_STARTS`` places, ``NaN``/``Infinity`` are refused, and every proposal is checked
(``check_proposal``): types, lengths, no control characters, a non-empty request, no duplicate
of an accepted one (by normalized text), and every tool it names must be one of the server's.
Refused proposals are counted by reason, never fatal; a run that accepts none ends with
``GenerationError`` (exit code 2) and writes nothing.

    knowlyr-hub tasks mcp --server mcp-server-time --generator-url http://127.0.0.1:8000/v1 -n 20 -o time.jsonl
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowlyrcore.endpoint import ChatEndpoint
from knowlyrcore.errors import InputError, MissingExtraError

ENV_ID = "knowlyr/mcp"
TEMPLATE = "generated"
FEATURE = "knowlyr-hub tasks mcp"

#: Tasks asked for per request.
BATCH_SIZE = 5
#: A reply longer than this is refused unread (a batch of tasks is a few kilobytes).
MAX_REPLY_CHARS = 100_000
#: Places in one reply where a JSON value is tried (bounds the work a hostile reply can cause).
MAX_DECODE_STARTS = 200
MAX_DESCRIPTION_CHARS = 2000
MAX_RUBRIC_CHARS = 2000
MAX_FACTS, MAX_FACT_CHARS = 10, 200
#: Accepted requests shown back to the generator so it does not repeat them.
SHOWN_ACCEPTED = 30
#: How much of a tool's description and schema the prompt shows, and of a workspace's files.
MAX_TOOL_DESCRIPTION_CHARS, MAX_SCHEMA_CHARS, MAX_WORKSPACE_FILES = 1000, 2000, 40
#: Generation settings: varied enough that batches differ, room for a batch of tasks.
TEMPERATURE = 0.8
TOKENS_PER_TASK, TOKENS_EXTRA = 350, 300

SYSTEM_PROMPT = (
    "You write tasks for evaluating and training an AI agent. The agent acts only through the tools "
    "of one MCP server, listed below, and ends each task with a final answer to the user. Each task "
    "is a request a real user of this server would make, solvable with these tools alone."
)
FORMAT = (
    "Answer with only a JSON array of {k} objects, each:\n"
    '{{"description": the user\'s request, self-contained, "rubric": how to judge whether the agent\'s '
    'final answer and actions did what was asked, "answer_contains": [short strings the final answer '
    'must contain] (only facts certain from the request itself; omit when not certain), "tools": [names '
    "of the tools a solver would call]}}"
)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# a word with an underscore that is not part of a path or file name (git_notes.md, src/git_x)
_IDENTIFIER = re.compile(r"(?<![\w./-])[A-Za-z][A-Za-z0-9]*_\w+(?![\w/-]|\.\w)")
_NOT_WORD = re.compile(r"[\W_]+")
_JSON_START = re.compile(r"[\[{]")


class GenerationError(InputError):
    """The generator's replies held no usable task (a model that does not follow the format):
    the user's move is another model or clearer instructions. Exit code 2."""


class TaskGenerator(ChatEndpoint):
    """The model that writes the tasks, served at ``base_url`` (its failures name it so); sampled
    at ``TEMPERATURE`` by default, so that batches differ."""

    role = "task generator"

    def __init__(self, base_url: str, model: str, *, temperature: float = TEMPERATURE, **settings: Any):
        super().__init__(base_url, model, temperature=temperature, **settings)


@dataclass
class Generated:
    """What a run produced: the accepted ``tasks``, the replies read (``attempts``) and the
    proposals refused, counted by reason (``dropped``)."""

    tasks: list[dict[str, Any]]
    attempts: int
    dropped: Counter[str] = field(default_factory=Counter)

    def dropped_summary(self) -> str:
        """``"3 duplicate, 1 reply without JSON"``, or ``"none"``."""
        return ", ".join(f"{count} {reason}" for reason, count in self.dropped.most_common()) or "none"


def list_tools(*, server: str | None = None, url: str | None = None, sandbox: str = "auto") -> list[dict[str, Any]]:
    """The server's tools as ``{"name", "description", "input_schema"}`` (knowlyr-sandbox's MCP client).

    knowlyr-sandbox comes with knowlyr-hub's ``sandbox`` extra and the MCP SDK with its ``mcp``
    extra; without either this is a ``MissingExtraError`` naming the one to install.
    """
    try:
        from agentsandbox.mcp import list_server_tools
    except MissingExtraError:
        raise
    except ImportError as exc:
        if (exc.name or "").split(".")[0] == "mcp":
            raise MissingExtraError(FEATURE, "knowlyr-hub", "mcp") from None
        raise MissingExtraError(FEATURE, "knowlyr-hub", "sandbox") from None
    tools = list_server_tools(server=server, url=url, sandbox=sandbox)
    if not tools:
        raise InputError(f"the MCP server {server or url} offers no tools: there is nothing to write tasks for")
    return tools


def describe_workspace(path: str | os.PathLike[str]) -> str:
    """A few lines telling the generator what each episode's workspace copy holds.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = (Path(folder) / "notes.txt").write_text("hi")
        ...     print(describe_workspace(folder))
        Each task starts from a fresh copy of a directory holding these files:
        notes.txt
    """
    root = Path(path)
    files: list[str] = []
    for folder, subfolders, names in os.walk(root):  # symlinks are listed, never followed
        subfolders[:] = sorted(d for d in subfolders if d != ".git")
        files += sorted(str((Path(folder) / name).relative_to(root)) for name in names)
        if len(files) > MAX_WORKSPACE_FILES:
            break
    kind = "a git repository" if (root / ".git").exists() else "a directory"
    shown = files[:MAX_WORKSPACE_FILES] + (
        [f"... (more than {MAX_WORKSPACE_FILES} files)"] if len(files) > MAX_WORKSPACE_FILES else []
    )
    return f"Each task starts from a fresh copy of {kind} holding these files:\n" + "\n".join(shown or ["(no files)"])


def build_messages(
    tools: Sequence[Mapping[str, Any]],
    k: int,
    *,
    focus: Sequence[str] = (),
    instructions: str | None = None,
    workspace: str | None = None,
    accepted: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The chat messages asking for ``k`` tasks: the tools, the workspace and the user's
    instructions, the tools to favour this time, the requests already accepted, and the format."""
    parts = ["Tools:\n" + "\n".join(_tool_line(tool) for tool in tools)]
    if workspace:
        parts.append(workspace)
    if instructions:
        parts.append(f"Instructions from the server's owner:\n{instructions}")
    if focus:
        parts.append(f"In this batch, favour tasks that need: {', '.join(focus)}.")
    if accepted:
        parts.append("Already written (write different ones):\n" + "\n".join(f"- {text}" for text in accepted))
    parts.append(FORMAT.format(k=k))
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def _tool_line(tool: Mapping[str, Any]) -> str:
    description = " ".join(str(tool.get("description") or "").split())[:MAX_TOOL_DESCRIPTION_CHARS]
    schema = json.dumps(tool.get("input_schema") or {}, ensure_ascii=False, sort_keys=True)
    if len(schema) > MAX_SCHEMA_CHARS:
        schema = schema[:MAX_SCHEMA_CHARS] + " ...(cut)"
    return f"- {tool['name']}: {description}\n  arguments: {schema}"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def proposals_in(text: str) -> list[Any]:
    """The proposals a reply holds: the JSON values found in it, left to right (an array gives its
    items, ``{"tasks": [...]}`` its list). Prose, code fences and broken values between them are
    skipped; ``NaN`` and ``Infinity`` are not JSON here. Never raises.

    Examples:
        >>> proposals_in('Sure! ```json\\n[{"description": "a"}, 3]\\n``` and {"description": "b"}')
        [{'description': 'a'}, 3, {'description': 'b'}]
        >>> proposals_in('{"tasks": [{"description": "a", "rubric": NaN}, {"description": "c"}]}')
        [{'description': 'c'}]
        >>> proposals_in("no JSON here")
        []
    """
    found: list[Any] = []
    position, starts = 0, 0
    while starts < MAX_DECODE_STARTS and (match := _JSON_START.search(text, position)):
        starts += 1
        try:
            value, position = _DECODER.raw_decode(text, match.start())
        except (ValueError, RecursionError):  # not JSON there, NaN, nested too deep, an int too long
            position = match.start() + 1
            continue
        if isinstance(value, dict) and isinstance(value.get("tasks"), list):
            value = value["tasks"]
        found.extend(value if isinstance(value, list) else [value])
    return found


def normalized(text: str) -> str:
    """The text two requests are compared by: case-folded, punctuation and spacing collapsed.

    Examples:
        >>> normalized("  What time is it in Tokyo?") == normalized("what time is it in  tokyo")
        True
    """
    return _NOT_WORD.sub(" ", text.casefold()).strip()


def check_proposal(proposal: Any, tool_names: Sequence[str]) -> tuple[dict[str, Any] | None, str]:
    """``(fields, "")`` for a usable proposal — ``description``, ``rubric`` and ``answer_contains``,
    stripped — else ``(None, reason)``. Keys other than those and ``tools`` are ignored.

    A tool is named either in ``tools`` or in the request as an identifier with an underscore
    that starts like one of the server's tools (``git_blame`` beside ``git_log``); each must be
    one of ``tool_names``. An ``answer_contains`` item the request itself contains would let an
    echo pass, so it is refused.

    Examples:
        >>> check_proposal({"description": "Show the log", "rubric": "Lists commits", "tools": ["git_log"]}, ["git_log"])
        ({'description': 'Show the log', 'rubric': 'Lists commits', 'answer_contains': []}, '')
        >>> check_proposal({"description": "Run git_blame on a.py", "rubric": "x"}, ["git_log"])
        (None, 'unknown tool')
        >>> check_proposal({"description": "Hi", "rubric": 3}, ["git_log"])
        (None, 'rubric missing or not text')
    """
    if not isinstance(proposal, dict):
        return None, "not an object"
    description, problem = _text(proposal.get("description"), "description", MAX_DESCRIPTION_CHARS)
    if problem:
        return None, problem
    rubric, problem = _text(proposal.get("rubric"), "rubric", MAX_RUBRIC_CHARS)
    if problem:
        return None, problem
    facts = proposal.get("answer_contains", [])
    if facts is None:
        facts = []
    if not isinstance(facts, list) or len(facts) > MAX_FACTS:
        return None, "answer_contains not a short list"
    for fact in facts:
        if not isinstance(fact, str) or not fact.strip() or len(fact) > MAX_FACT_CHARS or _CONTROL.search(fact):
            return None, "answer_contains item not a short text"
        if fact.strip().casefold() in description.casefold():
            return None, "answer_contains item given in the request"
    named = proposal.get("tools", [])
    if not isinstance(named, list) or not all(isinstance(name, str) for name in named):
        return None, "tools not a list of names"
    prefixes = tuple({name.split("_")[0] + "_" for name in tool_names if "_" in name})
    mentioned = [word for word in _IDENTIFIER.findall(description) if prefixes and word.startswith(prefixes)]
    if any(name not in tool_names for name in [*named, *mentioned]):
        return None, "unknown tool"
    return {"description": description, "rubric": rubric, "answer_contains": [f.strip() for f in facts]}, ""


def _text(value: Any, name: str, limit: int) -> tuple[str, str]:
    if not isinstance(value, str) or not value.strip():
        return "", f"{name} missing or not text"
    if len(value) > limit:
        return "", f"{name} over {limit} characters"
    if _CONTROL.search(value) or "\ufffd" in value:
        return "", f"{name} has unprintable characters"
    return value.strip(), ""


def task_record(
    fields: Mapping[str, Any], *, server: str | None, url: str | None, workspace_copy: str | None
) -> dict[str, Any]:
    """A ``knowlyr/mcp`` task (a ``TaskInfo`` dict) from a checked proposal; its id is a digest
    of the normalized request, so the same request always gets the same id."""
    metadata: dict[str, Any] = {"rubric": fields["rubric"]}
    if fields["answer_contains"]:
        metadata["answer_contains"] = list(fields["answer_contains"])
    metadata["template"] = TEMPLATE
    metadata.update({"server": server} if server else {"url": url})
    if workspace_copy:
        metadata["workspace"] = {"copy": workspace_copy}
    digest = hashlib.sha256(normalized(fields["description"]).encode()).hexdigest()[:12]
    return {"id": f"mcp-{digest}", "description": fields["description"], "metadata": metadata}


def generate_tasks(
    generator: ChatEndpoint,
    tools: Sequence[Mapping[str, Any]],
    n: int,
    *,
    server: str | None = None,
    url: str | None = None,
    seed: int = 0,
    instructions: str | None = None,
    workspace_copy: str | None = None,
    batch_size: int = BATCH_SIZE,
    max_attempts: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Generated:
    """Ask ``generator`` for tasks on ``tools`` until ``n`` are accepted or ``max_attempts``
    replies (default: twice the batches needed, plus one) were read.

    ``seed`` picks the tools each batch favours, so runs differ by seed only through the prompt.
    ``server`` (the command line) or ``url`` is recorded in every task, with ``workspace_copy``
    as the task's workspace. ``progress`` gets a line per batch. A generator that fails is an
    ``EndpointError``; one whose replies hold no usable task, a ``GenerationError``.
    """
    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be >= 1, got {n} and {batch_size}")
    attempts_allowed = max_attempts or 2 * math.ceil(n / batch_size) + 1
    names = [str(tool["name"]) for tool in tools]
    workspace = describe_workspace(workspace_copy) if workspace_copy else None
    rng = random.Random(seed)
    result = Generated(tasks=[], attempts=0)
    seen: set[str] = set()
    while len(result.tasks) < n and result.attempts < attempts_allowed:
        result.attempts += 1
        k = min(batch_size, n - len(result.tasks))
        focus = rng.sample(names, min(3, len(names)))
        accepted = [task["description"] for task in result.tasks[-SHOWN_ACCEPTED:]]
        messages = build_messages(
            tools, k, focus=focus, instructions=instructions, workspace=workspace, accepted=accepted
        )
        sized = copy.copy(generator)  # room for this batch's k tasks; the caller's endpoint is left as given
        sized.max_tokens = TOKENS_EXTRA + TOKENS_PER_TASK * k
        content = sized.complete(messages).get("content") or ""
        before, refused = len(result.tasks), sum(result.dropped.values())
        proposals = proposals_in(content) if len(content) <= MAX_REPLY_CHARS else None
        if proposals is None:
            result.dropped[f"reply over {MAX_REPLY_CHARS} characters"] += 1
        elif not proposals:
            result.dropped["reply without JSON"] += 1
        for proposal in proposals or ():
            if len(result.tasks) == n:
                break
            fields, problem = check_proposal(proposal, names)
            key = normalized(fields["description"]) if fields else ""
            if fields and key in seen:
                problem = "duplicate"
            if problem:
                result.dropped[problem] += 1
                continue
            seen.add(key)
            result.tasks.append(task_record(fields, server=server, url=url, workspace_copy=workspace_copy))
        if progress:
            progress(
                f"batch {result.attempts}/{attempts_allowed}: {len(result.tasks) - before} accepted, "
                f"{sum(result.dropped.values()) - refused} dropped ({len(result.tasks)}/{n} tasks)"
            )
    if not result.tasks:
        raise GenerationError(
            f"the generator proposed no valid task in {result.attempts} attempts (dropped: "
            f"{result.dropped_summary()}); try a stronger model or clearer instructions"
        )
    return result
