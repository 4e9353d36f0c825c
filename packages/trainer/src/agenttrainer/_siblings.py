"""Imported first by ``agenttrainer``: stops at once, naming the fix, where knowlyr-core is PyPI's."""

from importlib.util import find_spec

if find_spec("knowlyrcore") is None or find_spec("knowlyrcore.origin") is None:  # PyPI's has no knowlyrcore.origin
    import sys

    error = ImportError(
        "knowlyr-trainer needs knowlyr-core from the knowlyr checkout, not PyPI's (another project); fix: pip install ./packages/core (docs/install.md)"
    )
    # a knowlyr-* command that meets it ends on one line, exit 2, as knowlyrcore.origin.exit_in_one_line does (each
    # package keeps its own copy of this: the only code they share, knowlyr-core, is the wrong one here)
    sys.excepthook = lambda kind, value, tb, previous=sys.excepthook: (
        sys.exit(print(f"error: {value}", file=sys.stderr) or 2) if value is error else previous(kind, value, tb)
    )
    raise error
from knowlyrcore.origin import check_siblings

__version__ = check_siblings("knowlyr-trainer")  # the installed version; siblings checked too
