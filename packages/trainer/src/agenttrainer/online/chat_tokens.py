"""A multi-turn chat as one growing list of token ids, extended turn by turn and never re-rendered.

The first prompt is the chat template's rendering of the system turn and the task. After that,
each model answer is appended as the exact ids that were sampled, and each observation as the
tokens the template puts between that answer and the next assistant turn. Those tokens come from
rendering a small probe chat with and without the new message and keeping the difference, so any
template that renders a chat as a prefix-extending string works (ChatML, Llama 3, Qwen, ...).

Between the end-of-turn token the model sampled and the next message, templates often add a few
tokens of their own (ChatML's newline after ``<|im_end|>``); they are found the same way, as what
follows the last end-of-turn token of a rendered assistant turn. An answer cut by the token
budget gets the end-of-turn token closed for it. None of these tokens are the model's: the
rollout marks them as observation tokens, never trained on.
"""

from __future__ import annotations

from typing import Any

from agenttrainer.errors import TrainerError
from agenttrainer.generation import end_token_ids
from agenttrainer.inference import chat_template_tools

Message = dict[str, Any]
_PROBE = "probe"


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
