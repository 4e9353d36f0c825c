"""``python -m agenttrainer.serving CHECKPOINT``: the ``serve`` command without the trainer CLI."""

from agenttrainer.serving.cli import serve

if __name__ == "__main__":
    serve()
