"""Modules loaded on first use: ``stats = lazy_import("scipy.stats")`` at module level.

scipy.stats and scipy.optimize take ~1.5 s to import here, and the reward and hub CLIs imported
them for every command, ``--help`` included, though only calibration and evaluation statistics
use them. A lazy module is found at once (a missing package still fails at import time) and
executed on its first attribute access.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """The module ``name``, executed when an attribute of it is first read.

    Raises ``ModuleNotFoundError`` at once when ``name`` cannot be found. A module already imported
    is returned as it is.

    >>> json = lazy_import("json")
    >>> json.dumps([1])
    '[1]'
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
