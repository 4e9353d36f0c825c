"""Imported first by ``agenttrainer``: stops at once, naming the fix, where knowlyr-core is PyPI's."""

from importlib.util import find_spec

if find_spec("knowlyrcore") is None or find_spec("knowlyrcore.origin") is None:  # PyPI's has no knowlyrcore.origin
    raise ImportError(
        "knowlyr-trainer needs knowlyr-core from the knowlyr checkout, not PyPI's (another project); fix: pip install ./packages/core (docs/install.md)"
    )
from knowlyrcore.origin import check_siblings

__version__ = check_siblings("knowlyr-trainer")  # the installed version; siblings checked too
