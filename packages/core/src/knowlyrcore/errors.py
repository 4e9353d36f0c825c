"""The error hierarchy of knowlyr-core.

Every error raised on purpose by a knowlyr package derives from ``KnowlyrError`` so callers
can catch the whole family in one ``except`` while still telling the cases apart.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def describe_parse_error(exc: BaseException) -> tuple[int | None, str]:
    """(1-based line or None, problem) of a YAML/JSON parse error, without the file's content.

    PyYAML's messages quote the offending text and print the line under a caret; an error about
    a file a caller named (a host file passed as a config) must not echo it. Quoted text in the
    problem is replaced by '…'.
    """
    mark: Any = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is not None:
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "syntax error"
        return mark.line + 1, _QUOTED.sub("'…'", problem)
    if hasattr(exc, "lineno") and hasattr(exc, "msg"):  # json.JSONDecodeError
        return exc.lineno, f"{exc.msg} (column {exc.colno})"
    if isinstance(exc, RecursionError):
        return None, "nested too deeply"
    return None, "syntax error"


#: How every knowlyr command words an input path that does not exist, as
#: ``error: <path>: no such file or directory`` (exit code 2).
NO_SUCH_FILE = "no such file or directory"


def no_such_file(path: object) -> str:
    """``<path>: no such file or directory``: the message for a missing input path."""
    return f"{path}: {NO_SUCH_FILE}"


def os_problem(exc: OSError) -> str:
    """What went wrong, without path or errno: ``NO_SUCH_FILE`` for a missing file, else its strerror."""
    if isinstance(exc, FileNotFoundError):
        return NO_SUCH_FILE
    return exc.strerror or str(exc)


class KnowlyrError(Exception):
    """Base class of every error raised deliberately by knowlyr packages.

    ``exit_code`` is what a ``knowlyr-*`` command exits with when this error ends it
    (``knowlyrcore.clikit``): 1 for a failure while running, 2 for wrong input.
    """

    exit_code = 1


class InputError(KnowlyrError):
    """The input is wrong (a file, an argument, an id): fixing it is the user's move. Exit code 2."""

    exit_code = 2


class InvalidActionError(InputError, ValueError):
    """An action is not a well-formed tool call, or its parameters break the tool's schema."""


class InfrastructureError(KnowlyrError, RuntimeError):
    """The machinery around an episode failed, not the agent: a sandbox that crashed or timed out,
    a model endpoint that is down. Trainers mask such episodes out instead of scoring them zero."""


class RegistryError(InputError, LookupError):
    """An environment id is unknown, malformed, or its entry point failed to load."""


class DomainError(InputError, LookupError):
    """A domain profile is unknown or a profile file is invalid."""


class DataFormatError(InputError, ValueError):
    """A record in a data file is malformed.

    The message always names the file, the line (1-based) and, when known, the field, in the
    form ``path:line: field: problem`` so editors and terminals can jump to it.
    """

    def __init__(self, path: str, line: int | None, message: str, field: str | None = None):
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = message
        where = self.path if line is None else f"{self.path}:{line}"
        what = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {what}")


class MissingExtraError(InputError, ImportError):
    """A feature needs an optional extra that is not installed.

    The one type every knowlyr package raises for this, with a one-line message that ends in the
    commands installing the extra (``install``, from ``knowlyrcore.origin.install_command``: the
    checkout and wheelhouse forms, since the ``knowlyr-*`` names on PyPI are another project's).
    An ``ImportError`` too, so ``except ImportError`` keeps working; exit code 2, like any problem
    the user fixes before running again.

    Example:
        >>> print(MissingExtraError("LoRA", "knowlyr-trainer", "peft"))  # doctest: +ELLIPSIS
        LoRA needs the 'peft' extra: pip install './packages/trainer[peft]' from the knowlyr checkout, or pip install --find-links WHEELHOUSE 'knowlyr-trainer[peft]==...' (docs/install.md)
        >>> print(MissingExtraError("--policy 'ckpt'", "knowlyr-hub", "trainer", hint="or pass an endpoint"))  # doctest: +ELLIPSIS
        --policy 'ckpt' needs the 'trainer' extra: pip install ...'./packages/hub[trainer]' from ... (or pass an endpoint)
    """

    def __init__(self, feature: str, package: str, extra: str, *, hint: str | None = None, module: str | None = None):
        from knowlyrcore.origin import install_command  # origin imports nothing of knowlyr's: no cycle

        self.feature, self.package, self.extra = feature, package, extra
        self.install = install_command(package, extra)
        message = f"{feature} needs the '{extra}' extra: {self.install}"
        super().__init__(f"{message} ({hint})" if hint else message, name=module)


def require_extra(
    module: str, package: str, extra: str, feature: str | None = None, *, hint: str | None = None
) -> ModuleType:
    """Import and return ``module``, which ``package`` declares behind ``extra``; if it cannot be
    imported, raise ``MissingExtraError`` saying that ``feature`` (default: the module) needs it.

    Example:
        >>> require_extra("knowlyr_no_such_module", "knowlyr-hub", "report", "plots")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        knowlyrcore.errors.MissingExtraError: plots needs the 'report' extra: pip install './packages/hub[report]' from ...
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(feature or module, package, extra, hint=hint, module=module) from exc


class TaskRequiredError(InputError, ValueError):
    """An environment cannot start an episode without a task (of its own kind): ``reset`` was given
    none, or one without what the environment reads from it (a suite's ``metadata``).

    Raised by ``reset``; ``check_env`` passes it on rather than calling it a protocol fault, and
    ``knowlyr-core check`` answers it by asking for ``--task``. A ``ValueError`` too, as such
    environments raised before; exit code 2.
    """


class EnvCheckError(KnowlyrError, AssertionError):
    """``check_env`` found protocol violations; ``violations`` lists each one."""

    def __init__(self, violations: list[str]):
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"environment breaks the AgentEnv protocol ({len(violations)}):\n{lines}")
