"""BFCL (Berkeley Function Calling Leaderboard) single-turn categories as an environment.

``data`` reads the entries shipped by the ``bfcl-eval`` package (install it with
``pip install --no-deps bfcl-eval==2026.3.23``; importing this package does not need it),
``checker`` judges calls by BFCL's AST rules, ``env`` is ``knowlyr/bfcl``; the task suite is
``agentsandbox.suites.bfcl``. See docs/bfcl.md.
"""

from agentsandbox.bfcl.checker import Verdict, check, normalize
from agentsandbox.bfcl.data import CATEGORIES, INSTALL_STEP, LIVE_CATEGORIES, NON_LIVE_CATEGORIES, BFCLError
from agentsandbox.bfcl.env import BFCL_PROFILE, SYSTEM_PROMPT, BFCLEnv, json_schema, tool_specs

__all__ = [
    "BFCL_PROFILE",
    "CATEGORIES",
    "INSTALL_STEP",
    "LIVE_CATEGORIES",
    "NON_LIVE_CATEGORIES",
    "SYSTEM_PROMPT",
    "BFCLEnv",
    "BFCLError",
    "Verdict",
    "check",
    "json_schema",
    "normalize",
    "tool_specs",
]
