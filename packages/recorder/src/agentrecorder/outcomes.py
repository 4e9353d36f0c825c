"""The outcome fields of SWE-style data sets: resolved flags, exit status, patch, test logs.

Published trace data sets spell the same facts differently: whether the task was solved is
``resolved`` (SWE-Gym; a boolean, or the string ``"True"`` once a converter stringified it) or
``target`` (nebius); the patch is ``generated_patch`` or ``test_result.git_patch``; the test
run is a raw log (``eval_logs``, ``test_result.test_output``) whose last pytest summary line
(``== 2 failed, 95 passed in 0.77s ==``) gives the counts. ``test_result`` itself may be an
object or a JSON string, and its ``report`` a Python-literal string.

Example:
    >>> outcome, rest = swe_outcome({"resolved": "True", "exit_status": "submitted"}, "$")
    >>> outcome.success, outcome.exit_status, outcome.terminated
    (True, 'submitted', True)
    >>> pytest_counts("== 2 failed, 95 passed, 3 warnings in 0.77s ==").failed
    2
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from agentrecorder.errors import FieldError
from agentrecorder.fields import expect, get, path
from knowlyrcore.trajectory import Outcome, TestSummary

#: exit statuses of SWE-agent runs cut short by a budget rather than ended by the agent
TRUNCATING_EXITS = ("exit_cost", "exit_context", "exit_total_execution_time", "exit_command_timeout", "max_steps")
#: the keys ``swe_outcome`` reads
OUTCOME_KEYS = ("resolved", "target", "exit_status", "generated_patch", "eval_logs", "test_result")

_SUMMARY = re.compile(r"^=+ (.+? in [\d.]+s)(?: \([^)]*\))? =+\s*$", re.MULTILINE)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")


def flag(value: Any, where: str) -> bool | None:
    """A yes/no field: a boolean, or the string ``"True"``/``"False"`` (any case); ``None`` if absent."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise FieldError(where, f"expected a boolean (or 'True'/'False'), got {value!r:.40}")


def decoded(value: Any) -> Any:
    """A value some converter stringified: a JSON or Python-literal object/list string, parsed."""
    if not isinstance(value, str) or value.lstrip()[:1] not in ("{", "["):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def pytest_counts(log: str) -> TestSummary | None:
    """Counts from the last pytest summary line of ``log`` (the whole log kept as ``output``)."""
    lines = _SUMMARY.findall(log.replace("\r\n", "\n"))
    if not lines:
        return None
    counts = {"passed": 0, "failed": 0, "errors": 0}
    for number, word in _COUNT.findall(lines[-1]):
        counts["errors" if word.startswith("error") else word] += int(number)
    return TestSummary(**counts, output=log)


def swe_outcome(record: dict, where: str) -> tuple[Outcome, dict[str, Any]]:
    """The ``Outcome`` of a data-set row, and what of its ``test_result`` the outcome leaves out."""
    success = flag(record.get("resolved"), path(where, "resolved"))
    if success is None:
        success = flag(record.get("target"), path(where, "target"))
    exit_status = get(record, "exit_status", where, str, None)
    test_result = decoded(record.get("test_result"))
    test_result = dict(expect(test_result, dict, path(where, "test_result"))) if test_result is not None else {}
    twhere = path(where, "test_result")
    patch = get(record, "generated_patch", where, str, None) or get(test_result, "git_patch", twhere, str, None)
    log = get(record, "eval_logs", where, str, None) or get(test_result, "test_output", twhere, str, None)
    rest = {k: decoded(v) for k, v in test_result.items() if k not in ("git_patch", "test_output")}
    tests = pytest_counts(log) if log else None
    if log and tests is None:  # no pytest summary to count: the log is kept as it is
        rest["test_log"] = log
    truncated = bool(exit_status) and any(k in exit_status for k in TRUNCATING_EXITS)
    outcome = Outcome(
        success=success,
        score=None if success is None else float(success),
        tests=tests,
        exit_status=exit_status,
        patch=patch,
        terminated=bool(exit_status) and not truncated,
        truncated=truncated,
    )
    return outcome, rest
