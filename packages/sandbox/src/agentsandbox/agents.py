"""Agents for ``knowlyr-sandbox run``: a scripted list of actions, or a model behind any
OpenAI-compatible chat endpoint using function calling.

An agent is a callable ``observation -> action``; both keep their own history. The endpoint
agent offers the environment's tools in OpenAI form (from the domain profile) and turns the
first tool call of each reply into an action; a reply without a tool call becomes the
domain's closing tool (``finish``, ``submit`` or ``respond``) with the text as its message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentsandbox.chat_endpoint import TRANSPORT_ERRORS, post_chat_completion
from knowlyrcore.domain import get_domain_profile
from knowlyrcore.errors import KnowlyrError


class AgentError(KnowlyrError, RuntimeError):
    """The agent has no further action or its endpoint failed."""


class ScriptedAgent:
    """Plays back a fixed list of actions, one per call."""

    def __init__(self, actions: Iterable[dict[str, Any]]):
        self.actions = list(actions)
        self.position = 0

    def __call__(self, observation: str) -> dict[str, Any]:
        if self.position >= len(self.actions):
            raise AgentError(f"the script has only {len(self.actions)} actions and the episode is not over")
        action = self.actions[self.position]
        self.position += 1
        return action


class EndpointAgent:
    """A policy served at ``base_url`` (``.../v1``) choosing tools by function calling."""

    def __init__(self, base_url: str, model: str, *, domain: str, api_key: str | None = None,
                 system_prompt: str = "You are an agent. Use the tools to complete the task.",
                 temperature: float = 0.0, timeout: float = 120.0):  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self.timeout = timeout
        profile = get_domain_profile(domain)
        self.tools = [t.to_openai_tool() for t in profile.tools]
        closing = [t for t in ("finish", "submit", "respond") if t in profile.tool_names]
        self.closing_tool = closing[0] if closing else None
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
        self._pending_call: str | None = None

    def __call__(self, observation: str) -> dict[str, Any]:
        if self._pending_call is None:
            self.messages.append({"role": "user", "content": observation})
        else:
            self.messages.append({"role": "tool", "tool_call_id": self._pending_call, "content": observation})
        message = self._complete()
        calls = message.get("tool_calls") or []
        if calls:
            call = calls[0]
            self._pending_call = call.get("id") or "call_0"
            self.messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": [call]})
            try:
                params = json.loads(call["function"].get("arguments") or "{}")
            except json.JSONDecodeError:
                params = {"_unparsed_arguments": call["function"].get("arguments")}
            return {"tool": call["function"]["name"], "params": params, "thought": message.get("content") or ""}
        self._pending_call = None
        text = message.get("content") or ""
        self.messages.append({"role": "assistant", "content": text})
        if self.closing_tool is None:
            raise AgentError("the model replied without a tool call and the domain has no closing tool")
        key = {"finish": "message", "submit": "answer", "respond": "message"}[self.closing_tool]
        return {"tool": self.closing_tool, "params": {key: text}}

    def _complete(self) -> dict[str, Any]:
        body = {"model": self.model, "messages": self.messages, "tools": self.tools, "temperature": self.temperature}
        try:
            reply = post_chat_completion(self.base_url, body, api_key=self.api_key, timeout=self.timeout)
            return reply["choices"][0]["message"]
        except (*TRANSPORT_ERRORS, KeyError, IndexError) as exc:
            raise AgentError(f"policy endpoint {self.base_url} failed: {exc}") from exc
