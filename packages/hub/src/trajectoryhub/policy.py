"""``OpenAIPolicy``: an agent backed by any OpenAI-compatible chat endpoint (extra ``llm``).

Rollouts scale on the serving engine users already run (vLLM, SGLang, ``knowlyr-trainer
serve``): the policy keeps the episode's conversation, offers the environment's tools through
function calling, and turns the reply into a knowlyr action — the first tool call, or a
``respond`` action with the text when the model answered without calling a tool.
"""

from __future__ import annotations

import json
from typing import Any


class OpenAIPolicy:
    """``policy(observation) -> {"tool", "params", "thought"}`` over chat completions."""

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
        fallback_tool: str = "respond",
    ):
        try:
            from openai import OpenAI
        except ImportError as exc:
            raise ImportError("OpenAIPolicy needs the openai SDK: pip install 'knowlyr-hub[llm]'") from exc
        self.client = OpenAI(base_url=base_url, api_key=api_key or "not-needed")
        self.model = model
        self.system_prompt = system_prompt
        self.tools = tools
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.fallback_tool = fallback_tool
        self.messages: list[dict[str, Any]] = []
        self._pending_call: str | None = None
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self._pending_call = None

    def __call__(self, observation: Any) -> dict[str, Any]:
        text = observation if isinstance(observation, str) else json.dumps(observation, default=str)
        if self._pending_call is not None:
            self.messages.append({"role": "tool", "tool_call_id": self._pending_call, "content": text})
        else:
            self.messages.append({"role": "user", "content": text})
        request: dict[str, Any] = {"model": self.model, "messages": self.messages,
                                   "temperature": self.temperature, "max_tokens": self.max_tokens}  # fmt: skip
        if self.tools:
            request["tools"] = self.tools
        message = self.client.chat.completions.create(**request).choices[0].message
        content = message.content or ""
        calls = message.tool_calls or []
        if calls:
            call = calls[0]
            try:
                params = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError:
                params = {"input": call.function.arguments}
            self.messages.append({"role": "assistant", "content": content, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                                 "arguments": call.function.arguments}}]})  # fmt: skip
            self._pending_call = call.id
            return {"tool": call.function.name, "params": params if isinstance(params, dict) else {"input": params},
                    "thought": content, "id": call.id}  # fmt: skip
        self.messages.append({"role": "assistant", "content": content})
        self._pending_call = None
        return {"tool": self.fallback_tool, "params": {"message": content}, "thought": ""}
