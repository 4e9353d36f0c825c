"""``OpenAIPolicy``: an agent backed by any OpenAI-compatible chat endpoint (extra ``llm``).

Rollouts scale on the serving engine users already run (vLLM, SGLang, ``knowlyr-trainer
serve``): the policy keeps the episode's conversation (``knowlyrcore.ChatTranscript``), offers
the environment's tools through function calling, and turns each reply into a knowlyr action by
the rules every knowlyr policy shares (``knowlyrcore.action_from_message``): the first tool call
(unusable arguments give ``params == {}`` and a ``format_error``), else a call written in the
text, else the closing tool with the text (``respond``, or the first of ``finish``/``submit``/
``respond`` among ``tools``).

An environment whose tools differ per task (or change during an episode) hands them over by
``set_tools`` (the rollout loops of ``trajectoryhub`` do); with ``include_tools=False`` the
requests never carry tools, and replies are still parsed with the ones set.
"""

from __future__ import annotations

from typing import Any

from knowlyrcore.errors import require_extra
from knowlyrcore.policy import ChatTranscript
from knowlyrcore.tool_parsing import action_from_message


def _valid_text(value: Any) -> Any:
    """``value`` with every lone surrogate (``"\\ud800"``, which JSON can carry but UTF-8 cannot)
    replaced by U+FFFD. The endpoint's reply goes back to it in the next request and into the
    trajectory file, so unencodable text would end the whole evaluation; replaced, it is just a
    wrong answer the environment grades."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_valid_text(key): _valid_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_valid_text(item) for item in value]
    return value


class OpenAIPolicy:
    """``policy(observation) -> {"tool", "params", "thought"[, "id", "format_error"]}`` over chat
    completions; a knowlyr ``Policy`` (``reset(task=None)`` starts an episode)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        system_prompt: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        temperature: float = 0.0,
        max_tokens: int = 256,
        fallback_tool: str | None = None,
        include_tools: bool = True,
    ):
        OpenAI = require_extra("openai", "knowlyr-hub", "llm", "OpenAIPolicy").OpenAI
        self.client = OpenAI(base_url=base_url, api_key=api_key or "not-needed")
        self.model = model
        self.tools = self._built_tools = tools
        self.include_tools = include_tools
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.fallback_tool = fallback_tool
        self.transcript = ChatTranscript(system_prompt)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The episode's conversation so far."""
        return self.transcript.messages

    def reset(self, task: Any = None) -> None:
        """Start a new episode (the task arrives as the first observation) with the tools it was built with."""
        self.transcript.reset()
        self.tools = self._built_tools

    def set_tools(self, tools: list[dict[str, Any]]) -> None:
        """The episode's environment offers ``tools`` (OpenAI schemas) from now on."""
        self.tools = list(tools)

    def __call__(self, observation: Any) -> dict[str, Any]:
        self.transcript.add_observation(observation)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": self.transcript.messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.tools and self.include_tools:
            request["tools"] = self.tools
        message = self.client.chat.completions.create(**request).choices[0].message.model_dump(exclude_none=True)
        message = _valid_text(message)
        # arguments are a JSON string inside the reply: their escapes decode only here
        action = _valid_text(action_from_message(message, self.tools, closing_tool=self.fallback_tool))
        self.transcript.add_reply(message, action)
        return action
