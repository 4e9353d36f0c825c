"""Built-in adapters, one module per framework; see ``base`` for the protocol."""

from agentrecorder.adapters.base import RESPOND, Adapter, StepList

__all__ = ["RESPOND", "Adapter", "StepList"]
