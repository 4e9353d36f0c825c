"""OpenAI-compatible serving of a checkpoint (``knowlyr-trainer serve``); needs the ``serve`` extra.

``create_app`` builds the Starlette app, ``serving.cli.serve`` is the click command. The app is
imported on first use, so a plain install (no Starlette) can still load ``serving.cli`` and
``knowlyr-trainer`` lists ``serve``, which then says which extra to install.
"""

from typing import Any

__all__ = ["ChatServer", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from agenttrainer.serving import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
