"""The seven built-in domain profiles and the tools they declare."""

from __future__ import annotations

from knowlyrcore.domain import DomainProfile, OutcomeSpec, ToolCategory, ToolSpec, tool_spec

_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 1}

_TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in [
        # files and code
        tool_spec(
            "read_file",
            ToolCategory.READ,
            "Read a text file of the workspace, optionally only lines start..end (1-based, inclusive).",
            ["path"],
            path=_STR,
            start_line=_INT,
            end_line=_INT,
        ),
        tool_spec(
            "write_file",
            ToolCategory.WRITE,
            "Create or overwrite a file with the given content.",
            ["path", "content"],
            path=_STR,
            content=_STR,
        ),
        tool_spec(
            "edit_file",
            ToolCategory.WRITE,
            "Replace the one exact occurrence of old_str in a file by new_str.",
            ["path", "old_str", "new_str"],
            path=_STR,
            old_str=_STR,
            new_str=_STR,
        ),
        tool_spec(
            "bash",
            ToolCategory.EXECUTE,
            "Run a shell command in the workspace's persistent shell (cwd and variables carry over).",
            ["command"],
            command=_STR,
            timeout={"type": "number", "exclusiveMinimum": 0},
        ),
        tool_spec(
            "grep",
            ToolCategory.SEARCH,
            "Search files for a regular expression; returns path:line:text matches.",
            ["pattern"],
            pattern=_STR,
            path=_STR,
            include=_STR,
        ),
        tool_spec(
            "list_files",
            ToolCategory.SEARCH,
            "List files under a directory, optionally filtered by a glob pattern.",
            [],
            path=_STR,
            pattern=_STR,
        ),
        tool_spec(
            "git",
            ToolCategory.READ,
            "Inspect the repository: 'status', 'diff' or 'log'.",
            ["subcommand"],
            subcommand={"type": "string", "enum": ["status", "diff", "log"]},
            path=_STR,
        ),
        tool_spec(
            "run_tests",
            ToolCategory.EXECUTE,
            "Run the task's test command (or the given test path) and report the result.",
            [],
            path=_STR,
        ),
        tool_spec(
            "submit",
            ToolCategory.SUBMIT,
            "Finish the task and submit the current work (or the given answer) for evaluation.",
            [],
            answer=_STR,
            summary=_STR,
        ),
        tool_spec("finish", ToolCategory.SUBMIT, "End the episode, optionally with a final message.", [], message=_STR),
        # browser
        tool_spec("navigate", ToolCategory.NAVIGATE, "Open a URL in the browser.", ["url"], url=_STR),
        tool_spec(
            "click", ToolCategory.INTERACT, "Click the element matching a selector.", ["selector"], selector=_STR
        ),
        tool_spec(
            "type_text",
            ToolCategory.INTERACT,
            "Type text into the element matching a selector.",
            ["selector", "text"],
            selector=_STR,
            text=_STR,
            submit={"type": "boolean"},
        ),
        tool_spec(
            "scroll",
            ToolCategory.NAVIGATE,
            "Scroll the page up or down.",
            ["direction"],
            direction={"type": "string", "enum": ["up", "down"]},
            amount=_INT,
        ),
        tool_spec("screenshot", ToolCategory.READ, "Capture the visible page.", []),
        # conversation and knowledge work
        tool_spec("respond", ToolCategory.COMMUNICATE, "Reply to the user with a message.", ["message"], message=_STR),
        tool_spec(
            "send_message",
            ToolCategory.COMMUNICATE,
            "Send a message to a named recipient (a colleague, a channel).",
            ["recipient", "message"],
            recipient=_STR,
            message=_STR,
        ),
        tool_spec(
            "query_stats",
            ToolCategory.READ,
            "Look up records or statistics by a query (orders, accounts, metrics).",
            ["query"],
            query=_STR,
            filters={"type": "object"},
        ),
        tool_spec(
            "web_search",
            ToolCategory.SEARCH,
            "Search the web or a document index.",
            ["query"],
            query=_STR,
            max_results=_INT,
        ),
        tool_spec(
            "knowledge_base",
            ToolCategory.SEARCH,
            "Search the task's knowledge base and return the best-matching entries.",
            ["query"],
            query=_STR,
            top_k=_INT,
        ),
        tool_spec(
            "create_note",
            ToolCategory.WRITE,
            "Write a note to keep for later steps.",
            ["content"],
            title=_STR,
            content=_STR,
        ),
        tool_spec(
            "think",
            ToolCategory.THINK,
            "Reason privately; the thought is recorded but changes nothing.",
            ["thought"],
            thought=_STR,
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
