"""BFCL's multi-turn categories: their data, the backends of an episode, and BFCL's per-turn judgement.

Data, read from bfcl-eval through ``importlib.resources`` as the single-turn data is:
``BFCL_v4_<category>.json`` holds one entry a line, ``{"id", "question": [turn: [message]],
"initial_config": {class: state}, "involved_classes", "missed_function": {turn: [names]}}``
(``missed_function`` only in miss_func: functions withheld until that turn, whose question is
empty); ``possible_answer/BFCL_v4_<category>.json`` the ground truth, ``{"id", "ground_truth":
[turn: ["cd(folder='document')", ...]]}``; ``multi_turn_func_doc/<file>.json`` the function
documents of each backend class. An entry's functions are those of its involved classes, less
the withheld ones until their turn, as bfcl-eval builds them (it ignores ``excluded_function``).

Backends: BFCL's own stateful API classes (``BACKENDS``, imported from
``bfcl_eval.eval_checker.multi_turn_eval.func_source_code``), a fresh instance of each involved
class per episode, loaded with the entry's initial config by ``_load_scenario(config,
long_context=...)`` as BFCL does (MathAPI has no state to load). ``Backends.call`` is the only way
in, and refuses, as an error result rather than an exception: a function that is not offered now
(private methods such as ``_load_scenario`` or ``__class__`` never are), unknown or missing
parameters, arguments of the wrong type, values no JSON document holds (lone surrogates, integers
past 2**53, non-finite floats, nesting past 64 levels), the few arguments that would make a
backend compute without bound (``_too_costly``) and those past the bounds of ``agentsandbox.bfcl.bounds``
(arguments' size, names, paths; ``cp``/``mv`` of a directory into itself; MessageAPI's id space).
Calls that run return their result as JSON text, cut at ``bounds.MAX_RESULT_CHARS``. After each call
the instance's state is measured (``bounds.state_problem``): past a bound, the ``Backends`` is
broken and every call after is an error marked ``fatal`` (the environment ends the episode). A
task's ``initial_config`` is checked against the bounds before any backend sees it.

Ground truth: each call string is parsed with ``ast`` and accepted only as a call of a plain
name with literal JSON arguments (``parse_call``); nothing is evaluated. Positional arguments are
bound to names by the backend method's signature.

Judgement, BFCL's ``multi_turn_checker`` rules written anew: after each turn whose ground truth
has calls, (1) the model made a call in that turn; (2) every involved instance's public
attributes (names without a leading underscore) equal those of the ground-truth replay's
instance of the same class; (3) each ground-truth call's result is found among the results of
the model's calls so far, this turn's and earlier turns' (BFCL pools them so a result the model
got earlier need not be fetched again), as a multiset in any order. A turn without ground-truth
calls (the request cannot be done yet: a withheld function, a missing parameter) is not checked;
its calls still change the state the next turn is checked on. Every checked turn must pass.
"""

from __future__ import annotations

import ast
import collections
import copy
import decimal
import functools
import importlib
import inspect
import json
import math
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from agentsandbox.bfcl.bounds import call_problem, capped, config_problem, instance_problem, state_problem
from agentsandbox.bfcl.checker import show_value
from agentsandbox.bfcl.data import INSTALL_STEP, ROLES, BFCLError, data_dir, resource_records, schema_problem
from knowlyrcore.domain import ToolSpec
from knowlyrcore.errors import DataFormatError, InputError, InvalidActionError

MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
#: Categories whose backends load their long-context extras (BFCL: "long_context" in the category).
LONG_CONTEXT_CATEGORIES = ("multi_turn_long_context",)

_BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
#: class name -> (its module under _BACKEND_PACKAGE, its function documents under data/multi_turn_func_doc)
BACKENDS = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
#: Classes without a scenario to load (BFCL's STATELESS_CLASSES).
STATELESS = frozenset({"MathAPI"})
#: What BFCL's user says in the turn that brings the withheld functions (its question is empty).
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"

MAX_INT = 2**53  # the largest integer a JSON number carries exactly everywhere
MAX_DEPTH = 64  # knowlyrcore.domain.MAX_PARAM_DEPTH: checked by ToolSpec.validate_params
MAX_PRECISION = 1000  # digits: MathAPI's precision arguments set decimal's and mpmath's working precision
MAX_POWER_BITS = 10_000  # an integer power's size; its text must stay under Python's 4,300-digit limit


class CallSyntaxError(InvalidActionError):
    """A ground-truth call that is not ``name(literal, key=literal, ...)``."""


class ScenarioError(InputError, ValueError):
    """An initial config a backend cannot load."""


# --------------------------------------------------------------------------- ground truth


def parse_call(text: Any) -> tuple[str, list[Any], dict[str, Any]]:
    """``(name, positional arguments, keyword arguments)`` of a ground-truth call string.

    Only a call of a plain name whose arguments are literals that JSON can hold is accepted;
    anything else is a ``CallSyntaxError``. Nothing is evaluated: the arguments go through
    ``ast.literal_eval``.

    >>> parse_call("cd(folder='document')")
    ('cd', [], {'folder': 'document'})
    >>> parse_call("mean([1, 2.5])")
    ('mean', [[1, 2.5]], {})
    >>> parse_call("__import__('os').system('ls')")
    Traceback (most recent call last):
    ...
    agentsandbox.bfcl.multi_turn.CallSyntaxError: expected one call of a plain function name, like cd(folder='document')
    """
    if not isinstance(text, str):
        raise CallSyntaxError(f"expected a string, got {type(text).__name__}")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # ValueError: a NUL byte
        raise CallSyntaxError(f"not a Python call: {exc}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise CallSyntaxError("expected one call of a plain function name, like cd(folder='document')")
    name = node.func.id
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise CallSyntaxError(f"{name}: * and ** arguments are not literals")
    keys = [k.arg for k in node.keywords]
    if len(set(keys)) != len(keys):
        raise CallSyntaxError(f"{name}: an argument is given twice")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise CallSyntaxError(f"{name}: arguments must be literals (strings, numbers, lists, dicts)") from None
    try:  # JSON values only, so a policy can send the same arguments
        if json.loads(json.dumps([args, kwargs], allow_nan=False)) != [args, kwargs]:
            raise ValueError
    except (TypeError, ValueError, RecursionError):
        raise CallSyntaxError(f"{name}: arguments must be JSON values (no tuples, sets, bytes or NaN)") from None
    return name, args, kwargs


def bind_call(class_name: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a parsed call by parameter name, bound by the backend method's signature."""
    method = getattr(backend_class(class_name), name)
    try:
        bound = inspect.signature(method).bind(None, *args, **kwargs)  # None stands for self
    except TypeError as exc:
        raise CallSyntaxError(f"{name}: {exc}") from None
    return dict(list(bound.arguments.items())[1:])


# --------------------------------------------------------------------------- data


def backend_class(name: str) -> type:
    """BFCL's backend class ``name``; ``BFCLError`` (one line) when it or what it imports is missing."""
    if name not in BACKENDS:
        raise BFCLError(f"unknown BFCL backend class {name!r}; known: {', '.join(BACKENDS)}")
    data_dir()  # without bfcl-eval: the install line
    try:
        module = importlib.import_module(f"{_BACKEND_PACKAGE}.{BACKENDS[name][0]}")
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in ("", "bfcl_eval"):
            raise BFCLError(f"bfcl-eval's {name} backend does not import ({exc}): {INSTALL_STEP}") from None
        raise BFCLError(
            f"BFCL's {name} backend needs the {missing} package: pip install {missing} (docs/bfcl.md)"
        ) from None
    return getattr(module, name)


def _doc_problem(doc: Any) -> tuple[str, str] | None:
    """``(field, problem)`` of the first thing wrong in a function document, or None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or not doc["name"]:
        return "name", "expected a non-empty string"
    if not isinstance(doc.get("description", ""), str):
        return "description", "expected a string"
    if problem := schema_problem(doc.get("parameters"), "parameters"):
        return problem
    parameters = doc["parameters"]
    if parameters["type"] != "dict":
        return "parameters.type", f"expected 'dict', got {parameters['type']!r}"
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(r in parameters.get("properties", {}) for r in required):
        return "parameters.required", "expected a list of documented parameter names"
    return None


@functools.cache
def function_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """The function documents of backend class ``class_name``, in file order."""
    if class_name not in BACKENDS:
        raise BFCLError(f"unknown BFCL backend class {class_name!r}; known: {', '.join(BACKENDS)}")
    resource = data_dir() / "multi_turn_func_doc" / BACKENDS[class_name][1]
    docs: list[dict[str, Any]] = []
    for line, doc in resource_records(resource):
        if problem := _doc_problem(doc):
            raise DataFormatError(str(resource), line, problem[1], problem[0])
        if doc["name"] in {d["name"] for d in docs}:
            raise DataFormatError(str(resource), line, f"function {doc['name']!r} is documented twice", "name")
        docs.append(doc)
    return tuple(docs)


def function_owners(involved_classes: list[str]) -> dict[str, str]:
    """``{function name: class}`` over the involved classes (a later class wins a shared name, as in BFCL)."""
    return {doc["name"]: cls for cls in involved_classes for doc in function_docs(cls)}


def offered_functions(involved_classes: list[str], missed: dict[str, list[str]], turn: int) -> list[dict[str, Any]]:
    """The function documents offered in ``turn``: the involved classes', less those withheld until a later turn."""
    later = {name for t, names in missed.items() if int(t) > turn for name in names}
    return [doc for cls in involved_classes for doc in function_docs(cls) if doc["name"] not in later]


def _turn_problem(turn: Any, where: str, may_be_empty: bool) -> tuple[str, str] | None:
    if not isinstance(turn, list) or (not turn and not may_be_empty):
        return where, "expected a non-empty list of messages"
    for i, message in enumerate(turn):
        if (
            not isinstance(message, dict)
            or message.get("role") not in ROLES
            or not isinstance(message.get("content"), str)
        ):
            return f"{where}.{i}", f"expected {{role: {'|'.join(ROLES)}, content: string}}"
    return None


def _entry_problem(entry: dict[str, Any]) -> tuple[str, str] | None:
    """``(field, problem)`` of the first thing wrong in a multi-turn question entry, or None."""
    if not isinstance(entry.get("id"), str) or not entry["id"]:
        return "id", "expected a non-empty string"
    classes = entry.get("involved_classes")
    if not isinstance(classes, list) or not classes or len(set(map(str, classes))) != len(classes):
        return "involved_classes", "expected a non-empty list of distinct class names"
    if unknown := [c for c in classes if c not in BACKENDS]:
        return "involved_classes", f"unknown backend class {show_value(unknown[0])}; known: {', '.join(BACKENDS)}"
    config = entry.get("initial_config", {})
    if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
        return "initial_config", "expected {class name: {state}}"
    if problem := config_problem(config):  # before any backend sees it: bfcl-eval bounds nothing
        return problem[0], f"{problem[1]} (entry {entry['id']!r})"
    question = entry.get("question")
    if not isinstance(question, list) or not question:
        return "question", "expected a non-empty list of turns"
    missed = entry.get("missed_function", {})
    if not isinstance(missed, dict):
        return "missed_function", "expected {turn index: [function names]}"
    documented = function_owners(classes)
    for turn, names in missed.items():
        if not (isinstance(turn, str) and turn.isdigit() and 0 < int(turn) < len(question)):
            return f"missed_function.{turn}", f"expected a turn index from 1 to {len(question) - 1}"
        if not isinstance(names, list) or not all(n in documented for n in names):
            return f"missed_function.{turn}", "expected a list of functions of the involved classes"
    for t, turn in enumerate(question):
        if problem := _turn_problem(turn, f"question.{t}", may_be_empty=str(t) in missed):
            return problem
        if str(t) in missed and turn:
            return f"question.{t}", "the turn that brings withheld functions has no question in BFCL's format"
    return None


def _answer_problem(answer: dict[str, Any], entry: dict[str, Any]) -> tuple[str, str] | None:
    turns = answer.get("ground_truth")
    if not isinstance(turns, list) or len(turns) != len(entry["question"]):
        return "ground_truth", f"expected one list of calls for each of the {len(entry['question'])} turns"
    owners = function_owners(entry["involved_classes"])
    for t, calls in enumerate(turns):
        if not isinstance(calls, list):
            return f"ground_truth.{t}", "expected a list of call strings"
        for i, call in enumerate(calls):
            try:
                name, args, kwargs = parse_call(call)
                if name not in owners:
                    raise CallSyntaxError(f"function {name!r} is not a function of the involved classes")
                bind_call(owners[name], name, args, kwargs)
            except CallSyntaxError as exc:
                return f"ground_truth.{t}.{i}", str(exc)
    return None


def _category_resource(category: str, answers: bool = False) -> Any:
    if category not in MULTI_TURN_CATEGORIES:
        raise BFCLError(f"unknown BFCL multi-turn category {category!r}; known: {', '.join(MULTI_TURN_CATEGORIES)}")
    folder = data_dir() / "possible_answer" if answers else data_dir()
    return folder / f"BFCL_v4_{category}.json"


@functools.cache
def load_multi_turn(category: str) -> tuple[dict[str, Any], ...]:
    """Every entry of a multi-turn ``category`` in file order, each with its ``ground_truth``.

    Needs the backends (the ground truth's positional arguments are bound by their signatures).
    """
    resource = _category_resource(category)
    entries: dict[str, dict[str, Any]] = {}
    for line, entry in resource_records(resource):
        if problem := _entry_problem(entry):
            raise DataFormatError(str(resource), line, problem[1], problem[0])
        if entry["id"] in entries:
            raise DataFormatError(str(resource), line, f"id {entry['id']!r} appears twice", "id")
        entries[entry["id"]] = {**entry, "missed_function": entry.get("missed_function", {})}
    answers = _category_resource(category, answers=True)
    for line, answer in resource_records(answers):
        entry = entries.get(answer.get("id"))
        if entry is None:
            raise DataFormatError(str(answers), line, f"no question has id {show_value(answer.get('id'))}", "id")
        if problem := _answer_problem(answer, entry):
            raise DataFormatError(str(answers), line, problem[1], problem[0])
        entry["ground_truth"] = answer["ground_truth"]
    if missing := [i for i, e in entries.items() if "ground_truth" not in e]:
        raise DataFormatError(str(answers), None, f"{len(missing)} questions have no answer, e.g. {missing[0]!r}")
    return tuple(entries.values())


# --------------------------------------------------------------------------- backends


def _unfit_value(value: Any, where: str) -> str | None:
    """Why ``value`` is not a JSON value a backend may take (None when it is); depth is bounded already."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -MAX_INT <= value <= MAX_INT else f"{where}: integers beyond ±2**53 are refused"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: NaN and infinite numbers are refused"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where}: a string with a lone surrogate is refused (not UTF-8)"
        return None
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := _unfit_value(v, f"{where}[{i}]"))), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or (problem := _unfit_value(key, f"{where} key")):
                return problem or f"{where}: keys must be strings"
            if problem := _unfit_value(item, f"{where}.{key}"):
                return problem
        return None
    return f"{where}: a {type(value).__name__} is not a JSON value"


def _too_costly(class_name: str, function: str, params: dict[str, Any]) -> str | None:
    """Why a call would make a backend compute without bound (None when it would not)."""
    if class_name != "MathAPI":
        return None
    for key in ("precision", "decimal_places"):  # decimal's and mpmath's precision; round's 10**places
        if isinstance(params.get(key), (int, float)) and abs(params[key]) > MAX_PRECISION:
            return f"{key} beyond {MAX_PRECISION} is refused"
    base, exponent = params.get("base"), params.get("exponent")
    exact = function == "power" and type(base) is int and type(exponent) is int and exponent > 0
    if exact and exponent * max(abs(base).bit_length(), 1) > MAX_POWER_BITS:  # grows with the exponent
        return f"an integer power of more than {MAX_POWER_BITS} bits is refused"
    return None


def result_text(value: Any) -> str:
    """A backend's result as JSON text (objects JSON does not know, such as mpmath numbers, as their str)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(show_value(value))


_RUN_LOCK = threading.Lock()  # mpmath's precision is process-wide: one call at a time sets and reads it
#: The classes that set process-wide state (MathAPI: mpmath's precision), so whose calls hold ``_RUN_LOCK``.
#: No other class's call holds it: a long call of one episode must not stall every other episode.
PROCESS_WIDE = frozenset({"MathAPI"})


def _run(method: Any, arguments: dict[str, Any], class_name: str) -> str:
    """Run a backend method and render its result, leaking nothing into the process: MathAPI sets
    decimal's context precision and mpmath's global one, which are restored afterwards (its numbers
    are rendered before, as they print at the precision of the call). Only MathAPI's calls hold
    ``_RUN_LOCK``."""
    if class_name not in PROCESS_WIDE:
        with decimal.localcontext():  # decimal's context is per thread: nothing to lock
            return result_text(method(**arguments))
    with _RUN_LOCK:
        mpmath = sys.modules.get("mpmath")
        dps = mpmath.mp.dps if mpmath else None
        try:
            with decimal.localcontext():
                return result_text(method(**arguments))
        finally:
            if mpmath is not None:
                mpmath.mp.dps = dps


def refusal(tool: str, params: dict[str, Any], offered: dict[str, ToolSpec], owners: dict[str, str]) -> str | None:
    """Why ``Backends.call`` refuses ``tool(**params)`` without running it (None when it runs it).

    ``offered`` maps the functions offered now to their specs, ``owners`` each function to its class.
    """
    spec, class_name = offered.get(tool), owners.get(tool)
    # a plain function of the class itself, never a private, inherited or special attribute
    if (
        spec is None
        or class_name is None
        or tool.startswith("_")
        or not inspect.isfunction(inspect.getattr_static(backend_class(class_name), tool, None))
    ):
        return f"unknown function {show_value(tool)}: call one of the functions offered"
    properties = spec.parameters.get("properties", {})
    if unknown := [k for k in params if k not in properties]:
        return f"{tool}: unknown parameter {show_value(unknown[0])}; its parameters: {', '.join(properties) or 'none'}"
    try:
        spec.validate_params(params)  # types, required parameters, nesting depth
    except InvalidActionError as exc:
        return str(exc)
    if problem := _unfit_value(params, tool):
        return problem
    if problem := _too_costly(class_name, tool, params):
        return f"{tool}: {problem}"
    if problem := call_problem(class_name, tool, params):
        return f"{tool}: {problem}"
    return None


@dataclass
class CallResult:
    """One executed (or refused) call: ``text`` is both the observation and what the response check compares."""

    tool: str
    text: str
    error: str | None = None
    #: the call left the backend past a bound (or the backend was already): the episode must end
    fatal: bool = False


class Backends:
    """The backend instances of one episode (or of its ground-truth replay), fresh from the initial config."""

    def __init__(self, involved_classes: list[str], initial_config: dict[str, Any], long_context: bool) -> None:
        if problem := config_problem(initial_config):  # before any backend sees it
            raise ScenarioError(f"{problem[0]}: {problem[1]}")
        self.instances: dict[str, Any] = {}
        for name in involved_classes:
            instance = backend_class(name)()
            if name not in STATELESS:
                try:
                    instance._load_scenario(copy.deepcopy(initial_config.get(name, {})), long_context=long_context)
                except Exception as exc:  # a config not in BFCL's shape
                    raise ScenarioError(
                        f"initial_config.{name}: BFCL's backend cannot load it: {type(exc).__name__}: {show_value(exc)}"
                    ) from None
                if problem := _measured(name, instance):  # the long-context extras come with the load
                    raise ScenarioError(f"initial_config.{name}: once loaded, {problem}")
            self.instances[name] = instance
        self.owners = function_owners(involved_classes)
        #: why the state went past a bound (None while it has not): every call after is refused
        self.broken: str | None = None

    def call(self, tool: str, params: dict[str, Any], offered: dict[str, ToolSpec]) -> CallResult:
        """Run ``tool(**params)`` if it is offered now and its arguments fit its document and the bounds;
        never raises. A call that leaves its instance past a bound breaks the ``Backends``: its result
        and every later one are ``fatal`` errors."""
        if self.broken is not None:
            return CallResult(tool, f"[error] {_one_line(self.broken)}", _one_line(self.broken), fatal=True)
        error = refusal(tool, params, offered, self.owners)
        if error is None:
            class_name = self.owners[tool]
            instance = self.instances[class_name]
            if problem := instance_problem(class_name, instance, tool, params):
                error = f"{tool}: {problem}"
            else:
                text = None
                try:
                    text = _run(getattr(instance, tool), copy.deepcopy(params), class_name)
                except Exception as exc:  # the backend failed: the model's call was wrong, or the backend is
                    error = f"{tool} failed: {type(exc).__name__}: {exc}"
                # measured after a failed call too: a backend can fail half way through a change
                if problem := _measured(class_name, instance):
                    self.broken = f"{tool} left {class_name} past its bounds: {problem}; the episode ends"
                    return CallResult(tool, f"[error] {_one_line(self.broken)}", _one_line(self.broken), fatal=True)
                if text is not None:
                    return CallResult(tool, capped(text))
        error = _one_line(error)
        return CallResult(tool, f"[error] {error}", error)

    def state_differences(self, other: Backends) -> list[str]:
        """``Class.attribute`` of each public attribute whose value differs from ``other``'s (BFCL's state check)."""
        differences = []
        for class_name, expected in other.instances.items():
            actual = self.instances.get(class_name)
            for attribute, value in vars(expected).items():
                if attribute.startswith("_"):
                    continue
                try:
                    same = getattr(actual, attribute, _MISSING) == value
                except Exception:  # a comparison that fails is a difference
                    same = False
                if not same:
                    differences.append(f"{class_name}.{attribute}")
        return differences


_MISSING = object()


def _one_line(error: str) -> str:
    return " ".join(error.split())[:500].encode("utf-8", "backslashreplace").decode("utf-8")


def _measured(class_name: str, instance: Any) -> str | None:
    """``bounds.state_problem``; a state that cannot even be measured is past the bounds."""
    try:
        return state_problem(class_name, instance)
    except Exception as exc:
        return f"its state cannot be measured ({type(exc).__name__})"


# --------------------------------------------------------------------------- judgement


@dataclass
class TurnVerdict:
    """BFCL's verdict on one turn; ``checked`` is False for a turn without ground-truth calls."""

    turn: int
    checked: bool
    success: bool
    reason: str
    calls: int = 0
    missing: list[str] = field(default_factory=list)

    def as_info(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "checked": self.checked,
            "success": self.success,
            "reason": self.reason,
            "calls": self.calls,
        }


def judge_turn(
    turn: int,
    model_calls: list[CallResult],
    results_so_far: list[str],
    expected: list[CallResult],
    state_differences: list[str],
) -> TurnVerdict:
    """BFCL's verdict on ``turn``: ``model_calls`` are the turn's, ``results_so_far`` the texts of every
    model call up to its end, ``expected`` the ground-truth replay's calls of the turn and
    ``state_differences`` what ``Backends.state_differences`` found after it."""
    if not expected:
        return TurnVerdict(turn, False, True, "no ground-truth call in this turn: not checked", len(model_calls))
    if not model_calls:
        return TurnVerdict(turn, True, False, "no call in a turn that needs calls", 0)
    if state_differences:
        shown = ", ".join(state_differences[:5])
        return TurnVerdict(turn, True, False, f"state differs from the ground truth's: {shown}", len(model_calls))
    pool = collections.Counter(results_so_far)
    missing = []
    for call in expected:
        if pool[call.text] > 0:
            pool[call.text] -= 1
        else:
            missing.append(call.text)
    if missing:
        names = ", ".join(c.tool for c in expected if c.text in missing)
        reason = f"{len(missing)} ground-truth result(s) not among the model's results (from {names})"
        return TurnVerdict(turn, True, False, reason, len(model_calls), missing)
    return TurnVerdict(turn, True, True, "state and results match the ground truth", len(model_calls))
