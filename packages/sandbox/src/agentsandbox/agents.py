"""Agents for ``knowlyr-sandbox run``: a scripted list of actions, or a model behind any
OpenAI-compatible chat endpoint using function calling.

Both are knowlyr ``Policy`` objects: ``reset(task=None)`` starts an episode and
``agent(observation)`` returns the next action. The endpoint agent offers the environment's
tools in OpenAI form (from the domain profile), keeps the conversation in a
``knowlyrcore.ChatTranscript`` and turns each reply into an action by the rules every knowlyr
policy shares (``knowlyrcore.action_from_message``): the first tool call (unusable arguments give
``params == {}`` and a ``format_error``), else a call written in the text, else the domain's
closing tool (``finish``, ``submit`` or ``respond``) with the text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentsandbox.chat_endpoint import TRANSPORT_ERRORS, ChatEndpoint
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.errors import KnowlyrError
from knowlyrcore.policy import ChatTranscript
from knowlyrcore.tool_parsing import action_from_message, select_closing_tool


class AgentError(KnowlyrError, RuntimeError):
    """The agent has no further action or its endpoint failed."""


class ScriptedAgent:
    """Plays back a fixed list of actions, one per call, from the start at every ``reset``."""

    def __init__(self, actions: Iterable[dict[str, Any]]):
        self.actions = list(actions)
        self.position = 0

    def reset(self, task: Any = None) -> None:
        self.position = 0

    def __call__(self, observation: Any) -> dict[str, Any]:
        if self.position >= len(self.actions):
            raise AgentError(f"the script has only {len(self.actions)} actions and the episode is not over")
        action = self.actions[self.position]
        self.position += 1
        return action


class EndpointAgent(ChatEndpoint):
    """A policy served at ``base_url`` (``.../v1``) choosing tools by function calling."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        domain: str,
        api_key: str | None = None,
        system_prompt: str = "You are an agent. Use the tools to complete the task.",
        temperature: float = 0.0,
        timeout: float = 120.0,
    ):
        super().__init__(base_url, model, api_key=api_key, temperature=temperature, timeout=timeout)
        self.tools = [t.to_openai_tool() for t in get_domain_profile(domain).tools]
        self.closing_tool = select_closing_tool(self.tools)
        self.transcript = ChatTranscript(system_prompt)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The episode's conversation so far."""
        return self.transcript.messages

    def reset(self, task: Any = None) -> None:
        """Start a new episode (the task arrives as the first observation)."""
        self.transcript.reset()

    def __call__(self, observation: Any) -> dict[str, Any]:
        self.transcript.add_observation(observation)
        message = self._complete()
        action = action_from_message(message, self.tools, closing_tool=self.closing_tool)
        self.transcript.add_reply(message, action)
        return action

    def _complete(self) -> dict[str, Any]:
        try:
            reply = self.post(self.transcript.messages, tools=self.tools)
            message = reply["choices"][0]["message"]
        except (*TRANSPORT_ERRORS, KeyError, IndexError, TypeError) as exc:
            raise AgentError(f"policy endpoint {self.base_url} failed: {exc}") from exc
        if not isinstance(message, dict):
            raise AgentError(f"policy endpoint {self.base_url} returned a message that is not an object: {message!r}")
        return message
