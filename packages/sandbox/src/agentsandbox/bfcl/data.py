"""BFCL's single-turn data, read from the ``bfcl-eval`` package through ``importlib.resources``.

``bfcl_eval/data/BFCL_v4_<category>.json`` holds one entry per line: ``{"id", "question":
[[{"role", "content"}, ...]], "function": [{"name", "description", "parameters"}]}``, and
``bfcl_eval/data/possible_answer/BFCL_v4_<category>.json`` the ground truth: ``{"id",
"ground_truth": [{function name: {parameter: [allowed values]}}, ...]}``. The irrelevance
categories have no answers (the right answer is to call nothing). ``live_relevance`` is left
out: it has no ground truth (BFCL counts any call as right), so no expert could replay it.

bfcl-eval pins numpy and a dozen provider SDKs it needs only to query models, so it is installed
without them; its data files are all this package reads. Every entry point fails with one line
naming that step when it is missing (``BFCLError``); a malformed file fails with one line naming
the file, the line and the field (``DataFormatError``).
"""

from __future__ import annotations

import functools
import importlib.resources
from typing import Any

from agentsandbox.suites import SuiteError
from knowlyrcore.errors import DataFormatError, InputError
from knowlyrcore.jsonl import iter_json_lines

INSTALL_STEP = "pip install --no-deps bfcl-eval==2026.3.23"

#: Expert-curated functions (BFCL's non-live categories): the ``test`` split.
NON_LIVE_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
#: User-contributed functions (BFCL's live categories): the ``train`` split.
LIVE_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance")
CATEGORIES = NON_LIVE_CATEGORIES + LIVE_CATEGORIES
#: Categories whose right answer is no call at all; they have no possible-answer file.
IRRELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance")

#: BFCL's parameter types (its Python checker knows no others).
TYPES = ("string", "integer", "float", "boolean", "array", "tuple", "dict", "any")
ROLES = ("system", "user", "assistant")


class BFCLError(SuiteError, InputError):
    """bfcl-eval is not installed, or a category is unknown: fixing it is the user's move."""


def data_dir() -> Any:
    """The ``bfcl_eval/data`` directory (a ``Traversable``); ``BFCLError`` when bfcl-eval is missing."""
    try:
        return importlib.resources.files("bfcl_eval") / "data"
    except ImportError:  # also a module blocked with sys.modules["bfcl_eval"] = None
        raise BFCLError(f"BFCL tasks need the bfcl-eval package: {INSTALL_STEP} (docs/bfcl.md)") from None


def _category_file(category: str, answers: bool = False) -> Any:
    if category not in CATEGORIES:
        raise BFCLError(f"unknown BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    folder = data_dir() / "possible_answer" if answers else data_dir()
    return folder / f"BFCL_v4_{category}.json"


def resource_records(resource: Any) -> list[tuple[int, dict[str, Any]]]:
    with importlib.resources.as_file(resource) as path:
        return list(iter_json_lines(path))


def schema_problem(schema: Any, where: str) -> tuple[str, str] | None:
    """``(field, problem)`` of the first thing wrong in a parameter's schema, or None."""
    if not isinstance(schema, dict):
        return where, f"expected an object, got {type(schema).__name__}"
    kind = schema.get("type")
    if kind not in TYPES:
        return f"{where}.type", f"unknown type {kind!r}; BFCL's types are {', '.join(TYPES)}"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return f"{where}.properties", f"expected an object, got {type(properties).__name__}"
    for name, inner in properties.items():
        if problem := schema_problem(inner, f"{where}.properties.{name}"):
            return problem
    if kind in ("array", "tuple") and "items" in schema:
        return schema_problem(schema["items"], f"{where}.items")
    return None


def _entry_problem(entry: dict[str, Any]) -> tuple[str, str] | None:
    """``(field, problem)`` of the first thing wrong in a question entry, or None."""
    if not isinstance(entry.get("id"), str) or not entry["id"]:
        return "id", "expected a non-empty string"
    question = entry.get("question")
    if not isinstance(question, list) or len(question) != 1 or not isinstance(question[0], list) or not question[0]:
        return "question", "expected one turn: a list holding one non-empty list of messages"
    for i, message in enumerate(question[0]):
        if (
            not isinstance(message, dict)
            or message.get("role") not in ROLES
            or not isinstance(message.get("content"), str)
        ):
            return f"question.0.{i}", f"expected {{role: {'|'.join(ROLES)}, content: string}}"
    functions = entry.get("function")
    if not isinstance(functions, list):  # empty in a few irrelevance entries
        return "function", "expected a list of function documents"
    names = set()
    for i, function in enumerate(functions):
        where = f"function.{i}"
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            return f"{where}.name", "expected a non-empty string"
        if function["name"] in names:
            return f"{where}.name", f"function {function['name']!r} is documented twice"
        names.add(function["name"])
        if not isinstance(function.get("description", ""), str):
            return f"{where}.description", "expected a string"
        parameters = function.get("parameters")
        if problem := schema_problem(parameters, f"{where}.parameters"):
            return problem
        if parameters["type"] != "dict":
            return f"{where}.parameters.type", f"expected 'dict', got {parameters['type']!r}"
        required = parameters.get("required", [])
        if not isinstance(required, list) or not all(r in parameters.get("properties", {}) for r in required):
            return f"{where}.parameters.required", "expected a list of documented parameter names"
    return None


def _answer_problem(answer: dict[str, Any], functions: list[dict[str, Any]]) -> tuple[str, str] | None:
    calls = answer.get("ground_truth")
    if not isinstance(calls, list) or not calls:
        return "ground_truth", "expected a non-empty list of calls"
    names = {f["name"] for f in functions}
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or len(call) != 1:
            return f"ground_truth.{i}", "expected {function name: {parameter: [allowed values]}}"
        ((name, params),) = call.items()
        if name not in names:
            return f"ground_truth.{i}", f"function {name!r} is not among the entry's functions"
        if not isinstance(params, dict) or not all(isinstance(v, list) for v in params.values()):
            return f"ground_truth.{i}.{name}", "expected {parameter: [allowed values]}"
    return None


@functools.cache
def load_entries(category: str) -> tuple[dict[str, Any], ...]:
    """Every question entry of ``category``, in file order."""
    resource = _category_file(category)
    entries, seen = [], set()
    for line, entry in resource_records(resource):
        if problem := _entry_problem(entry):
            raise DataFormatError(str(resource), line, problem[1], problem[0])
        if entry["id"] in seen:
            raise DataFormatError(str(resource), line, f"id {entry['id']!r} appears twice", "id")
        seen.add(entry["id"])
        entries.append(entry)
    return tuple(entries)


@functools.cache
def load_answers(category: str) -> dict[str, list[dict[str, dict[str, list[Any]]]]]:
    """``{entry id: ground-truth calls}`` of ``category``; empty for the irrelevance categories."""
    entries = {e["id"]: e for e in load_entries(category)}
    if category in IRRELEVANCE_CATEGORIES:
        return {}
    resource = _category_file(category, answers=True)
    answers = {}
    for line, answer in resource_records(resource):
        entry = entries.get(answer.get("id"))
        if entry is None:
            raise DataFormatError(str(resource), line, f"no question has id {answer.get('id')!r}", "id")
        if problem := _answer_problem(answer, entry["function"]):
            raise DataFormatError(str(resource), line, problem[1], problem[0])
        answers[entry["id"]] = answer["ground_truth"]
    if missing := [i for i in entries if i not in answers]:
        raise DataFormatError(str(resource), None, f"{len(missing)} questions have no answer, e.g. {missing[0]!r}")
    return answers
