"""knowlyr-reward depends on knowlyr-core: its errors are core's family, and importing it checks
that the knowlyr-core next to it is ours, as every other dependent package does."""

import subprocess
import sys
from importlib import metadata

from agentreward.errors import JudgeError, RewardError, TrajectoryFormatError
from knowlyrcore import origin
from knowlyrcore.clikit import exit_code_of
from knowlyrcore.errors import DataFormatError, KnowlyrError


def test_reward_errors_are_knowlyr_errors_with_their_exit_codes():
    malformed = TrajectoryFormatError("t.jsonl", 3, "must be a list", field="steps")
    assert isinstance(RewardError("x"), KnowlyrError) and isinstance(malformed, DataFormatError)
    assert str(malformed) == "t.jsonl:3: steps: must be a list" and malformed.line == 3
    assert exit_code_of(malformed) == 2 and exit_code_of(JudgeError("endpoint down")) == 1


IMPORT_WITH_CORE_AT = """
import importlib.metadata as metadata, sys
real = metadata.version
metadata.version = lambda dist: "0.1.2" if dist == "knowlyr-core" else real(dist)
try:
    import agentreward
except ImportError as error:
    print("knowlyrcore imported:", "knowlyrcore" in sys.modules)
    print(error)
    sys.exit(1)
"""


def test_import_refuses_another_projects_core_before_importing_it():
    done = subprocess.run([sys.executable, "-c", IMPORT_WITH_CORE_AT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    imported, message = done.stdout.strip().split("\n")
    assert imported == "knowlyrcore imported: False"
    version = metadata.version("knowlyr-reward")
    assert message == origin.mismatch_message("knowlyr-reward", version, "knowlyr-core", "0.1.2")
