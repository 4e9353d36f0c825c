import pytest


def step(name, params=None, output="", exit_code=None, error=None, **extra):
    return {"tool_call": {"name": name, "parameters": params or {}},
            "observation": {"output": output, "exit_code": exit_code, "error": error}, **extra}  # fmt: skip


@pytest.fixture
def make_step():
    return step
