"""OpenAI-compatible serving of a checkpoint (``knowlyr-trainer serve``); needs the ``serve`` extra.

``create_app`` builds the Starlette app, ``serving.cli.serve`` is the click command.
"""

from agenttrainer.serving.app import ChatServer, create_app

__all__ = ["ChatServer", "create_app"]
