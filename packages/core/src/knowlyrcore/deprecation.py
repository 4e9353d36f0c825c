"""Old public names that moved keep working: ``moved_names`` gives a module its ``__getattr__``.

Each old name resolves to the object at its new home and warns (``DeprecationWarning``) once per
process, naming the new place.

Examples:
    >>> __getattr__ = moved_names("old.place", {"TaskInfo": "knowlyrcore.models"})
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     __getattr__("TaskInfo").__name__, __getattr__("TaskInfo").__name__
    ('TaskInfo', 'TaskInfo')
    >>> [str(w.message) for w in caught]
    ['old.place.TaskInfo moved to knowlyrcore.models.TaskInfo']
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def moved_names(
    module: str,
    moved: Mapping[str, str],
    replaced: Mapping[str, tuple[str, Callable[[], Any]]] | None = None,
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` whose names ``moved`` (name -> new module) moved.

    ``replaced`` maps a name that has no new home to ``(what to use instead, a function giving
    its value)``.
    """
    replaced = dict(replaced or {})
    warned: set[str] = set()

    def __getattr__(name: str) -> Any:
        if name in moved:
            message = f"{module}.{name} moved to {moved[name]}.{name}"
        elif name in replaced:
            message = f"{module}.{name} is deprecated: use {replaced[name][0]}"
        else:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name not in warned:
            warned.add(name)
            warnings.warn(message, DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(moved[name]), name) if name in moved else replaced[name][1]()

    return __getattr__
