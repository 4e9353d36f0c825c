"""The seven built-in domain profiles and the tools they declare."""

from __future__ import annotations

from typing import Any

from knowlyrcore.domain import DomainProfile, OutcomeSpec, ToolCategory, ToolSpec


def _params(required: list[str] | None = None, **properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}


_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 1}

_TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in [
        # files and code
        ToolSpec(
            name="read_file",
            category=ToolCategory.READ,
            description="Read a text file of the workspace, optionally only lines start..end (1-based, inclusive).",
            parameters=_params(["path"], path=_STR, start_line=_INT, end_line=_INT),
        ),
        ToolSpec(
            name="write_file",
            category=ToolCategory.WRITE,
            description="Create or overwrite a file with the given content.",
            parameters=_params(["path", "content"], path=_STR, content=_STR),
        ),
        ToolSpec(
            name="edit_file",
            category=ToolCategory.WRITE,
            description="Replace the one exact occurrence of old_str in a file by new_str.",
            parameters=_params(["path", "old_str", "new_str"], path=_STR, old_str=_STR, new_str=_STR),
        ),
        ToolSpec(
            name="bash",
            category=ToolCategory.EXECUTE,
            description="Run a shell command in the workspace's persistent shell (cwd and variables carry over).",
            parameters=_params(["command"], command=_STR, timeout={"type": "number", "exclusiveMinimum": 0}),
        ),
        ToolSpec(
            name="grep",
            category=ToolCategory.SEARCH,
            description="Search files for a regular expression; returns path:line:text matches.",
            parameters=_params(["pattern"], pattern=_STR, path=_STR, include=_STR),
        ),
        ToolSpec(
            name="list_files",
            category=ToolCategory.SEARCH,
            description="List files under a directory, optionally filtered by a glob pattern.",
            parameters=_params([], path=_STR, pattern=_STR),
        ),
        ToolSpec(
            name="git",
            category=ToolCategory.READ,
            description="Inspect the repository: 'status', 'diff' or 'log'.",
            parameters=_params(
                ["subcommand"], subcommand={"type": "string", "enum": ["status", "diff", "log"]}, path=_STR
            ),
        ),
        ToolSpec(
            name="run_tests",
            category=ToolCategory.EXECUTE,
            description="Run the task's test command (or the given test path) and report the result.",
            parameters=_params([], path=_STR),
        ),
        ToolSpec(
            name="submit",
            category=ToolCategory.SUBMIT,
            description="Finish the task and submit the current work (or the given answer) for evaluation.",
            parameters=_params([], answer=_STR, summary=_STR),
        ),
        ToolSpec(
            name="finish",
            category=ToolCategory.SUBMIT,
            description="End the episode, optionally with a final message.",
            parameters=_params([], message=_STR),
        ),
        # browser
        ToolSpec(
            name="navigate",
            category=ToolCategory.NAVIGATE,
            description="Open a URL in the browser.",
            parameters=_params(["url"], url=_STR),
        ),
        ToolSpec(
            name="click",
            category=ToolCategory.INTERACT,
            description="Click the element matching a selector.",
            parameters=_params(["selector"], selector=_STR),
        ),
        ToolSpec(
            name="type_text",
            category=ToolCategory.INTERACT,
            description="Type text into the element matching a selector.",
            parameters=_params(["selector", "text"], selector=_STR, text=_STR, submit={"type": "boolean"}),
        ),
        ToolSpec(
            name="scroll",
            category=ToolCategory.NAVIGATE,
            description="Scroll the page up or down.",
            parameters=_params(["direction"], direction={"type": "string", "enum": ["up", "down"]}, amount=_INT),
        ),
        ToolSpec(
            name="screenshot",
            category=ToolCategory.READ,
            description="Capture the visible page.",
            parameters=_params([]),
        ),
        # conversation and knowledge work
        ToolSpec(
            name="respond",
            category=ToolCategory.COMMUNICATE,
            description="Reply to the user with a message.",
            parameters=_params(["message"], message=_STR),
        ),
        ToolSpec(
            name="send_message",
            category=ToolCategory.COMMUNICATE,
            description="Send a message to a named recipient (a colleague, a channel).",
            parameters=_params(["recipient", "message"], recipient=_STR, message=_STR),
        ),
        ToolSpec(
            name="query_stats",
            category=ToolCategory.READ,
            description="Look up records or statistics by a query (orders, accounts, metrics).",
            parameters=_params(["query"], query=_STR, filters={"type": "object"}),
        ),
        ToolSpec(
            name="web_search",
            category=ToolCategory.SEARCH,
            description="Search the web or a document index.",
            parameters=_params(["query"], query=_STR, max_results=_INT),
        ),
        ToolSpec(
            name="knowledge_base",
            category=ToolCategory.SEARCH,
            description="Search the task's knowledge base and return the best-matching entries.",
            parameters=_params(["query"], query=_STR, top_k=_INT),
        ),
        ToolSpec(
            name="create_note",
            category=ToolCategory.WRITE,
            description="Write a note to keep for later steps.",
            parameters=_params(["content"], title=_STR, content=_STR),
        ),
        ToolSpec(
            name="think",
            category=ToolCategory.THINK,
            description="Reason privately; the thought is recorded but changes nothing.",
            parameters=_params(["thought"], thought=_STR),
        ),
    ]
}


def _tools(*names: str) -> list[ToolSpec]:
    return [_TOOLS[n] for n in names]


def _weights(goal: float, tool: float, param: float, info: float, redundancy: float) -> dict[str, float]:
    return {
        "goal_progress": goal,
        "tool_selection": tool,
        "param_correctness": param,
        "info_utilization": info,
        "non_redundancy": redundancy,
    }


BUILTIN_DOMAINS: dict[str, DomainProfile] = {
    p.name: p
    for p in [
        DomainProfile(
            name="coding",
            display_name="Code agent",
            description="Repository tasks in a sandbox (SWE-bench style): read, edit, run, test, submit.",
            tools=_tools(
                "read_file",
                "write_file",
                "edit_file",
                "bash",
                "grep",
                "list_files",
                "git",
                "run_tests",
                "submit",
                "finish",
            ),
            terminal_tools=["submit", "finish"],
            outcome=OutcomeSpec(method="tests", description="The task's test command passes after submit."),
            rubric_weights=_weights(0.30, 0.20, 0.20, 0.15, 0.15),
        ),
        DomainProfile(
            name="browser",
            display_name="Web agent",
            description="Web automation through a browser.",
            tools=_tools("navigate", "click", "type_text", "scroll", "screenshot", "finish"),
            terminal_tools=["finish"],
            outcome=OutcomeSpec(method="judge", description="The final page state or answer satisfies the task."),
            rubric_weights=_weights(0.35, 0.20, 0.20, 0.10, 0.15),
        ),
        DomainProfile(
            name="conversation",
            display_name="Dialog agent",
            description="A customer-facing assistant that looks things up and answers the user.",
            tools=_tools("respond", "query_stats", "send_message", "web_search"),
            terminal_tools=["respond"],
            outcome=OutcomeSpec(method="judge", description="The reply resolves the user's request."),
            rubric_weights=_weights(0.35, 0.20, 0.15, 0.20, 0.10),
        ),
        DomainProfile(
            name="engineering",
            display_name="Engineering assistant",
            description="Code review and architecture questions over a repository and a knowledge base.",
            tools=_tools("read_file", "grep", "git", "knowledge_base", "bash", "submit", "finish"),
            terminal_tools=["submit", "finish"],
            outcome=OutcomeSpec(method="judge", description="The submitted review or design answers the task."),
            rubric_weights=_weights(0.30, 0.20, 0.15, 0.20, 0.15),
        ),
        DomainProfile(
            name="advisory",
            display_name="Expert advisor",
            description="Expert consultation grounded in a knowledge base and search.",
            tools=_tools("respond", "knowledge_base", "web_search", "create_note", "submit", "finish"),
            terminal_tools=["submit", "finish"],
            outcome=OutcomeSpec(method="judge", description="The advice is correct, grounded and complete."),
            rubric_weights=_weights(0.35, 0.15, 0.15, 0.25, 0.10),
        ),
        DomainProfile(
            name="discussion",
            display_name="Discussion participant",
            description="Multi-turn discussion that draws on a knowledge base.",
            tools=_tools("respond", "knowledge_base", "think", "submit"),
            terminal_tools=["respond", "submit"],
            outcome=OutcomeSpec(method="judge", description="The contribution moves the discussion forward."),
            rubric_weights=_weights(0.35, 0.15, 0.10, 0.25, 0.15),
        ),
        DomainProfile(
            name="generic",
            display_name="Generic",
            description="No declared tools: rewards fall back to domain-independent heuristics.",
            outcome=OutcomeSpec(method="heuristic"),
        ),
    ]
}
