"""mini-swe-agent trajectories: a bare messages list, or the v1.1 dict.

mini-swe-agent keeps no separate action log: the assistant writes a THOUGHT and exactly one
fenced bash block (```` ```bash ```` or ```` ```mswea_bash_command ````), and the next user
message carries the result as ``<returncode>N</returncode><output>...</output>``. So each
assistant message is a ``bash {"command": ...}`` step whose thought is the prose around the
block; a reply with zero or several blocks (which mini-swe-agent rejects) is kept as a
``no_action`` step with the format error in its observation.

The v1.1 dict (``{"info", "messages", "trajectory_format": "mini-swe-agent-1"}``) adds
``info.exit_status``, ``info.submission`` and ``info.model_stats`` (cost, API calls). A bare
list has no info, so the run counts as submitted when its last command echoes the submit
sentinel (``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` / ``MINI_SWE_AGENT_FINAL_OUTPUT``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import Adapter, StepList, code_blocks, strip_blocks
from agentrecorder.fields import expect, get, path, text_of
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Outcome, Trajectory, Usage

BASH_LANGUAGES = {"bash", "mswea_bash_command", "sh", "shell"}
SUBMIT_SENTINELS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_OUTPUT = re.compile(r"<output>\n?(.*?)</output>", re.DOTALL)


def parse_result(content: str) -> tuple[str, int | None]:
    """Split a mini-swe-agent result message into ``(output, exit_code)``.

    Example:
        >>> parse_result("<returncode>0</returncode>\\n<output>\\nhello\\n</output>")
        ('hello\\n', 0)
    """
    code = _RETURNCODE.search(content)
    output = _OUTPUT.search(content)
    text = output.group(1) if output else _RETURNCODE.sub("", content).strip()
    return text, int(code.group(1)) if code else None


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


class MiniSWEAgentAdapter(Adapter):
    name = "mini-swe-agent"
    description = "mini-swe-agent: messages list or v1.1 dict {info, messages, trajectory_format}; bash code blocks"
    priority = 30

    def check(self, record: Any) -> str | None:
        if isinstance(record, dict):
            fmt = record.get("trajectory_format")
            if isinstance(fmt, str) and fmt.startswith("mini-swe-agent"):
                return None
            if not _is_messages(record.get("messages")):
                return "no 'trajectory_format: mini-swe-agent-*' and no 'messages' list"
            messages = record["messages"]
        elif _is_messages(record):
            messages = record
        else:
            return "not a messages list or a dict with 'messages'"
        if any(m.get("tool_calls") for m in messages):
            return "messages carry tool_calls (an OpenAI tool-calling chat)"
        for m in messages:
            content = m.get("content")
            is_reply = m.get("role") == "assistant" and isinstance(content, str)
            if is_reply and any(lang in BASH_LANGUAGES for lang, *_ in code_blocks(content)):
                return None
        return "no assistant message with a ```bash / ```mswea_bash_command block"

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        if isinstance(record, dict):
            info = get(record, "info", "$", dict, {})
            messages = get(record, "messages", "$", list)
            base = "$.messages"
        else:
            info, messages, base = {}, expect(record, list, "$"), "$"
        steps = StepList()
        task, system, waiting = "", None, None
        for i, message in enumerate(messages):
            where = path(base, i)
            message = expect(message, dict, where)
            role = get(message, "role", where, str)
            content = text_of(message.get("content"), path(where, "content"))
            if role == "system" and system is None:
                system = content
            elif role == "user" and not task and not len(steps):
                task = content
            elif role == "assistant":
                blocks = [b for b in code_blocks(content) if b[0] in BASH_LANGUAGES]
                thought = strip_blocks(content, blocks)
                if len(blocks) == 1:
                    waiting = steps.add("bash", {"command": blocks[0][1]}, thought=thought)
                else:
                    waiting = steps.add(
                        "no_action", {}, thought=thought, metadata={"format_error": f"{len(blocks)} bash blocks"}
                    )
            elif role in ("user", "tool") and waiting is not None:
                output, code = parse_result(content)
                steps.set_observation(waiting, output, exit_code=code)
                waiting = None

        exit_status = get(info, "exit_status", "$.info", str, None)
        last = steps.last
        submitted = last is not None and any(
            s in str(last.tool_call.parameters.get("command")) for s in SUBMIT_SENTINELS
        )
        if exit_status is None and submitted:
            exit_status = "Submitted"
        stats = get(info, "model_stats", "$.info", dict, {})
        cost = get(stats, "instance_cost", "$.info.model_stats", (int, float), None)
        calls = get(stats, "api_calls", "$.info.model_stats", int, None)
        config = info.get("config") if isinstance(info.get("config"), dict) else {}
        model_cfg = config.get("model") if isinstance(config.get("model"), dict) else {}
        metadata: dict[str, Any] = {"format": "mini-swe-agent"}
        if system is not None:
            metadata["system_prompt"] = system
        for key in ("mini_version", "config"):
            if key in info:
                metadata[key] = info[key]
        if isinstance(record, dict) and isinstance(record.get("instance_id"), str):
            metadata["instance_id"] = record["instance_id"]
        yield Trajectory(
            id=metadata.get("instance_id", ""),
            task=TaskInfo(id=metadata.get("instance_id", ""), description=task, domain="coding"),
            agent="mini-swe-agent",
            model=str(model_cfg.get("model_name") or ""),
            steps=steps.steps,
            outcome=Outcome(
                exit_status=exit_status,
                patch=get(info, "submission", "$.info", str, None) or None,
                terminated=exit_status is not None and exit_status.lower() == "submitted",
                truncated=exit_status is not None and "limit" in exit_status.lower(),
            ),
            usage=Usage(cost_usd=None if cost is None else float(cost), api_calls=calls)
            if cost is not None or calls is not None
            else None,
            source=source,
            metadata=metadata,
        )
