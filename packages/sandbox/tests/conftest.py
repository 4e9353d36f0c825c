import sys
from pathlib import Path

import pytest

# The shipped suite's asserts should explain themselves when they fail here.
pytest.register_assert_rewrite("agentsandbox.testing")

# --import-mode=importlib puts nothing on sys.path; the shared task fixtures live beside this file.
sys.path.insert(0, str(Path(__file__).parent))
