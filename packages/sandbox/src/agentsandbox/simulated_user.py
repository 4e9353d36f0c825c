"""``SimulatedUser``: the other side of a dialog, played by a model behind a chat endpoint.

The user model gets the task's user instructions as its system prompt and sees the agent's
messages as the "user" turns of its own chat, so from its point of view it is an ordinary
assistant conversation with the roles swapped. It ends the conversation by including
``STOP`` in a reply (as tau-bench's simulated users do). The endpoint is reached through
``knowlyrcore.endpoint.ChatEndpoint`` (an Anthropic URL works too); its failures are
``EndpointError``s naming the simulated user's endpoint.
"""

from __future__ import annotations

from knowlyrcore.endpoint import ChatEndpoint

STOP = "###STOP###"

SYSTEM_PROMPT = (
    "You are a user talking to an AI assistant. Stay in character and write only the user's next "
    "message, briefly. Your situation and goal:\n{instructions}\n\n"
    f"When your goal is met or the conversation cannot go further, end your message with {STOP}."
)


class SimulatedUser(ChatEndpoint):
    """A user played by ``model`` at ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``)."""

    role = "simulated user"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        instructions: str = "",
        temperature: float = 0.0,
        timeout: float = 60.0,
    ):
        super().__init__(base_url, model, api_key=api_key, temperature=temperature, timeout=timeout)
        self.instructions = instructions
        self.messages: list[dict[str, str]] = []

    def start(self, instructions: str | None = None) -> str:
        """Begin a new conversation and return the user's opening message."""
        text = instructions if instructions is not None else self.instructions
        self.messages = [{"role": "system", "content": SYSTEM_PROMPT.format(instructions=text or "(none given)")}]
        # The user model speaks first: prompt it with an empty assistant greeting.
        return self._turn("Hello, how can I help you today?")

    def reply(self, assistant_message: str) -> str:
        """The user's answer to the assistant's message."""
        if not self.messages:
            self.start()
        return self._turn(assistant_message)

    @staticmethod
    def is_stop(message: str) -> bool:
        return STOP in message

    def _turn(self, assistant_message: str) -> str:
        self.messages.append({"role": "user", "content": assistant_message})
        content = self.complete(self.messages)["content"] or ""
        self.messages.append({"role": "assistant", "content": content})
        return content
