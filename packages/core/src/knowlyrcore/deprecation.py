"""Old public names keep working, each warning (``DeprecationWarning``) once per process with its new name.

- ``moved_names`` gives a module its ``__getattr__`` for names that moved (or were replaced);
- ``renamed_kwargs`` lets a function take a keyword under its old name;
- ``renamed_fields`` lets a dataclass take a field under its old name (constructor and attribute);
- ``rename_keys`` maps the old keys of a mapping (a config file's) to their new names.

Examples:
    >>> __getattr__ = moved_names("old.place", {"TaskInfo": "knowlyrcore.models"})
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     __getattr__("TaskInfo").__name__, __getattr__("TaskInfo").__name__
    ('TaskInfo', 'TaskInfo')
    >>> [str(w.message) for w in caught]
    ['old.place.TaskInfo moved to knowlyrcore.models.TaskInfo']
    >>> @renamed_kwargs(n_turns="max_steps")
    ... def play(*, max_steps=1):
    ...     return max_steps
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     play(n_turns=3), play(n_turns=4)
    (3, 4)
    >>> [str(w.message).rpartition(".")[2] for w in caught]  # once, though called twice
    ['play(): n_turns is deprecated: use max_steps']
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T", bound=type)

#: The deprecation messages given in this process: each is given once.
given: set[str] = set()


def first_time(message: str) -> bool:
    """Whether ``message`` is given for the first time in this process (it then counts as given)."""
    if message in given:
        return False
    given.add(message)
    return True


def warn_once(message: str, *, stacklevel: int = 2) -> None:
    """Warn ``message`` (``DeprecationWarning``) the first time this process asks; ``stacklevel``
    counts from the caller, as ``warnings.warn``'s does."""
    if first_time(message):
        warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)


def moved_names(
    module: str,
    moved: Mapping[str, str],
    replaced: Mapping[str, tuple[str, Callable[[], Any]]] | None = None,
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` whose names ``moved`` (name -> new module) moved.

    ``replaced`` maps a name that has no new home (or a new name) to ``(what to use instead, a
    function giving its value)``.
    """
    replaced = dict(replaced or {})

    def __getattr__(name: str) -> Any:
        if name in moved:
            warn_once(f"{module}.{name} moved to {moved[name]}.{name}")
            return getattr(importlib.import_module(moved[name]), name)
        if name in replaced:
            warn_once(f"{module}.{name} is deprecated: use {replaced[name][0]}")
            return replaced[name][1]()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def rename_keys(
    values: Mapping[str, Any], renamed: Mapping[str, str], where: str, *, stacklevel: int = 2
) -> dict[str, Any]:
    """``values`` with each old key of ``renamed`` (old -> new) under its new name, warning once
    per old key that ``where``'s ``old`` is deprecated. A value under both names is a ``TypeError``."""
    out = dict(values)
    for old, new in renamed.items():
        if old not in out:
            continue
        if new in out:
            raise TypeError(f"{where}: {old} is the old name of {new}; give only {new}")
        warn_once(f"{where}: {old} is deprecated: use {new}", stacklevel=stacklevel + 1)
        out[new] = out.pop(old)
    return out


def renamed_kwargs(**renamed: str) -> Callable[[F], F]:
    """Decorator: the function's keyword ``old`` is now ``renamed[old]``; the old one still works."""

    def decorate(function: F) -> F:
        where = f"{function.__module__}.{function.__qualname__}()"

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **rename_keys(kwargs, renamed, where))

        return wrapper  # type: ignore[return-value]

    return decorate


def renamed_fields(**renamed: str) -> Callable[[T], T]:
    """Decorator of a dataclass (above ``@dataclass``): field ``old`` is now ``renamed[old]``.

    The constructor takes the old keyword and the old attribute reads and writes the new one, each
    warning once; ``cls.renamed_fields`` holds the mapping (for readers of config files). A
    subclass that ``@dataclass`` rebuilds needs the decorator again.
    """

    def decorate(cls: T) -> T:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **rename_keys(kwargs, renamed, cls.__name__))

        cls.__init__ = __init__  # type: ignore[misc]
        cls.renamed_fields = dict(renamed)  # type: ignore[attr-defined]
        for old, new in renamed.items():
            setattr(cls, old, _renamed_attribute(f"{cls.__name__}.{old}", new))
        return cls

    return decorate


def _renamed_attribute(old: str, new: str) -> property:
    message = f"{old} is deprecated: use {new}"

    def get(self: Any) -> Any:
        warn_once(message)
        return getattr(self, new)

    def set_(self: Any, value: Any) -> None:
        warn_once(message)
        setattr(self, new, value)

    return property(get, set_, doc=f"Deprecated: use ``{new}``.")
