import pytest
from pydantic import ValidationError

from knowlyrcore import TaskInfo, ToolResult


def test_coerce_accepts_models_dicts_strings_and_none():
    task = TaskInfo(id="a", description="b")
    assert TaskInfo.coerce(task) is task
    assert TaskInfo.coerce("fix it") == TaskInfo(description="fix it")
    assert TaskInfo.coerce(None) == TaskInfo()
    assert TaskInfo.coerce({"id": "x", "test_command": "pytest"}).test_command == "pytest"


def test_coerce_moves_unknown_keys_into_metadata_and_maps_task_id():
    task = TaskInfo.coerce({"task_id": 7, "description": "d", "kb": ["fact"], "metadata": {"m": 1}})
    assert task.id == "7"
    assert task.metadata == {"kb": ["fact"], "m": 1}


def test_coerce_rejects_other_types():
    with pytest.raises(TypeError, match="TaskInfo, dict or str"):
        TaskInfo.coerce(42)


def test_task_forbids_unknown_fields_when_built_directly():
    with pytest.raises(ValidationError):
        TaskInfo(descripton="typo")


def test_max_steps_must_be_positive():
    with pytest.raises(ValidationError):
        TaskInfo(max_steps=0)


def test_tool_result_success_and_observation():
    assert ToolResult(output="ok").success
    assert not ToolResult(output="", exit_code=2).success
    failed = ToolResult(output="partial", error="timed out after 5s")
    assert not failed.success
    assert failed.to_observation() == "partial\n[error] timed out after 5s"
    assert ToolResult(error="denied").to_observation() == "[error] denied"
