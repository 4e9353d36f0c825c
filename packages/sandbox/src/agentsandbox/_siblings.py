"""Imported first by ``agentsandbox``: stops at once, naming the fix, where knowlyr-core is PyPI's."""

from importlib.util import find_spec

if find_spec("knowlyrcore") is None or find_spec("knowlyrcore.origin") is None:  # PyPI's has no knowlyrcore.origin
    import sys

    error = ImportError(
        "knowlyr-sandbox needs knowlyr-core from the knowlyr checkout, not PyPI's (another project); fix: pip install ./packages/core (docs/install.md)"
    )

    # Each package carries its own copy of these lines: the only code they share, knowlyr-core, is the wrong one here.
    def _one_line(kind, value, traceback, previous=sys.excepthook):  # as knowlyrcore.origin.exit_in_one_line
        if value is not error:
            return previous(kind, value, traceback)
        print(f"error: {value}", file=sys.stderr)  # uncaught (a knowlyr-* command): this line, no traceback
        raise SystemExit(2)

    sys.excepthook = _one_line
    raise error
from knowlyrcore.origin import check_siblings

__version__ = check_siblings("knowlyr-sandbox")  # the installed version; siblings checked too
