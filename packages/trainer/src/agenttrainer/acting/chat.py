"""An episode's chat: which message carries each observation, and its token ids turn by turn.

Messages. The task is the first user turn. After a native tool call the next observation goes
back as a ``tool`` message; after an ``Action:`` text answer (or a malformed call, kept verbatim)
as a user ``Observation: ...`` turn; after a plain reply as a plain user turn
(``observation_message``, ``answer_style``). An answer becomes an action by the rules every
knowlyr policy shares (``knowlyrcore.tool_parsing``, documented there and in docs/core.md):

1. a ``<tool_call>{"name", "arguments"}</tool_call>`` block (the chat template's native format);
2. ``Thought: ... Action: ...`` text, the trainer's agent SFT format, where the action is a JSON
   call object, ``name {json}``, ``name(...)`` or ``name free text``;
3. a bare or fenced JSON call object anywhere in the answer;
4. otherwise the closing tool with the answer as its text.

Tokens. ``ChatTokens`` keeps the chat as one growing list of token ids, extended turn by turn and
never re-rendered. The first prompt is the chat template's rendering of the system turn and the
task. After that, each model answer is appended as the exact ids that were sampled, and each
observation as the tokens the template puts between that answer and the next assistant turn.
Those tokens come from rendering a small probe chat with and without the new message and keeping
the difference, so any template that renders a chat as a prefix-extending string works (ChatML,
Llama 3, Qwen, ...).

Between the end-of-turn token the model sampled and the next message, templates often add a few
tokens of their own (ChatML's newline after ``<|im_end|>``); they are found the same way, as what
follows the last end-of-turn token of a rendered assistant turn. An answer cut by the token
budget gets the end-of-turn token closed for it. None of these tokens are the model's: the
rollout marks them as observation tokens, never trained on.
"""

from __future__ import annotations

from typing import Any

from agenttrainer.acting.generators import end_token_ids
from agenttrainer.errors import TrainerError
from knowlyrcore.recording import observation_text
from knowlyrcore.tool_parsing import parse_reply

Message = dict[str, Any]
_PROBE = "probe"


def chat_template_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """The ``tools`` argument of a chat template: tools as OpenAI function schemas
    ``{"type": "function", "function": {...}}``, or None when there are none.

    Accepts OpenAI schemas, ``{"name", "description", "parameters"}`` dicts, and objects with
    those attributes (e.g. knowlyr-core ``ToolSpec``). Tool *names* of an environment's domain are
    ``knowlyrcore.tool_schemas(names, domain)``'s job.
    """
    if not tools:
        return None
    schemas = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            schemas.append(tool)
            continue
        get = tool.get if isinstance(tool, dict) else lambda key, default=None, t=tool: getattr(t, key, default)
        name = get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a tool needs a name, got {tool!r}")
        function = {
            "name": name,
            "description": get("description", "") or "",
            "parameters": get("parameters") or {"type": "object", "properties": {}},
        }
        schemas.append({"type": "function", "function": function})
    return schemas


def observation_message(observation: Any, last_style: str | None) -> Message:
    """The chat message that carries ``observation`` after an answer of style ``last_style``.

    After a native tool call it is a ``tool`` message; after an ``Action:`` text answer (or a
    malformed call, kept verbatim) a user ``Observation: ...`` turn; after a plain reply, or
    for the task itself (``last_style=None``), a plain user turn.
    """
    content = observation_text(observation)
    if last_style == "tool_call":
        return {"role": "tool", "content": content}
    if last_style == "text":
        return {"role": "user", "content": f"Observation: {content}"}
    return {"role": "user", "content": content}


def answer_style(reply: Any) -> str:
    """How an answer is kept in the chat: a call whose arguments were unusable stays verbatim
    (``"text"``), so the model sees what it wrote."""
    return "text" if reply.style == "tool_call" and "format_error" in reply.action else reply.style


def action_from_answer(text: str, tools: list[Any] | None = None) -> tuple[dict[str, Any], str] | None:
    """The knowlyr action in a model answer and its style (``"tool_call"`` or ``"text"``), or None
    when the answer calls no tool (``knowlyrcore.parse_reply`` gives the closing action then).

    Example:
        >>> action_from_answer('Thought: look around\\nAction: {"name": "bash", "parameters": {"command": "ls"}}')
        ({'tool': 'bash', 'params': {'command': 'ls'}, 'thought': 'look around'}, 'text')
    """
    reply = parse_reply(text, tools)
    return None if reply.style == "reply" else (reply.action, reply.style)


class TemplateError(TrainerError, ValueError):
    """The chat template does not render a chat as an append-only token sequence."""

    exit_code = 2  # wrong input: the command exits 2 (knowlyrcore.clikit)


class ChatTokens:
    """Token ids of a chat turn by turn for one tokenizer, system prompt and tool set."""

    def __init__(self, tokenizer: Any, *, system_prompt: str | None = None, tools: list[Any] | None = None) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise TemplateError("the tokenizer has no chat template; use an instruct model")
        self.tokenizer = tokenizer
        self.system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self.tools = chat_template_tools(tools)
        self.end_token_ids = end_token_ids(tokenizer)
        if not self.end_token_ids:
            raise TemplateError("the tokenizer has no end-of-turn token (eos or <|im_end|>)")
        self._after_end = self._tokens_after_end()

    def _ids(self, messages: list[Message], *, generation_prompt: bool) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, tools=self.tools, tokenize=False, add_generation_prompt=generation_prompt
        )
        # A lone surrogate (a policy's JSON escape an environment echoes, a task file's) is no
        # Unicode text and tokenizers refuse it: it goes in as its escape, ``\ud800``.
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _probe(self, next_role: str) -> list[Message]:
        """A finished exchange to render new messages after (a tool message follows a tool call)."""
        answer: Message = {"role": "assistant", "content": _PROBE}
        if next_role == "tool":
            call = {"type": "function", "function": {"name": _PROBE, "arguments": {}}}
            answer = {"role": "assistant", "content": "", "tool_calls": [call]}
        return [*self.system, {"role": "user", "content": _PROBE}, answer]

    def _tokens_after_end(self) -> list[int]:
        ids = self._ids(self._probe("user"), generation_prompt=False)
        ends = [i for i, token in enumerate(ids) if token in self.end_token_ids]
        if not ends:
            raise TemplateError("the chat template does not end an assistant turn with an end-of-turn token")
        return ids[ends[-1] + 1 :]

    def prompt(self, first_message: Message | list[Message]) -> list[int]:
        """The first prompt: system turn, tool schemas, ``first_message`` (or a list of messages),
        the assistant turn opened."""
        messages = first_message if isinstance(first_message, list) else [first_message]
        return self._ids([*self.system, *messages], generation_prompt=True)

    def continuation(self, answer_ids: list[int], message: Message) -> list[int]:
        """Tokens to append after a sampled answer so the chat continues with ``message`` and the
        next assistant turn is open: the end-of-turn token when the answer was cut, the template's
        tokens after it, the message, the next assistant header."""
        probe = self._probe(message["role"])
        before = self._ids(probe, generation_prompt=False)
        after = self._ids([*probe, message], generation_prompt=True)
        if after[: len(before)] != before:
            raise TemplateError(
                "the chat template re-renders earlier turns when a message is added; "
                "token-in/token-out rollouts need an append-only template"
            )
        closing = [] if answer_ids and answer_ids[-1] in self.end_token_ids else [self.end_token_ids[0]]
        return closing + self._after_end + after[len(before) :]
