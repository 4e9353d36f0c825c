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


def moved_names(module: str, moved: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` whose names ``moved`` (name -> new module) moved."""
    warned: set[str] = set()

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name not in warned:
            warned.add(name)
            warnings.warn(f"{module}.{name} moved to {moved[name]}.{name}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(moved[name]), name)

    return __getattr__
