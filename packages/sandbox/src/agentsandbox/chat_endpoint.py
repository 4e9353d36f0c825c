"""One POST to an OpenAI-compatible ``/chat/completions`` endpoint, shared by the endpoint agent
and the simulated user (stdlib only, so the package needs no HTTP client), and ``ChatEndpoint``,
the settings both keep for it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

# What a failed call raises: unreachable or refused (URLError), too slow, or a body that is not JSON.
TRANSPORT_ERRORS = (urllib.error.URLError, TimeoutError, json.JSONDecodeError)


def post_chat_completion(base_url: str, body: dict[str, Any], *, api_key: str | None, timeout: float) -> Any:
    """POST ``body`` to ``{base_url}/chat/completions`` and return the decoded JSON reply.

    Raises one of :data:`TRANSPORT_ERRORS`; callers turn them into their own error type. An HTTP
    error status keeps the start of the server's body, which usually says what was wrong.
    """
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key or 'none'}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise urllib.error.URLError(f"HTTP {exc.code} {exc.reason}: {detail}") from exc


class ChatEndpoint:
    """A chat model served at ``base_url`` (``.../v1``) and the settings every call to it carries."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None, temperature: float, timeout: float):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self.timeout = timeout

    def post(self, messages: list[dict[str, Any]], **fields: Any) -> Any:
        """The decoded reply to ``messages`` (plus body ``fields`` such as ``tools``); raises one of
        :data:`TRANSPORT_ERRORS`."""
        body = {"model": self.model, "messages": messages, **fields, "temperature": self.temperature}
        return post_chat_completion(self.base_url, body, api_key=self.api_key, timeout=self.timeout)
