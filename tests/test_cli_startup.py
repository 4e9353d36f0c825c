"""What a CLI loads before it does anything: ``--help`` must not pay for scipy's statistics."""

from __future__ import annotations

import subprocess
import sys

import pytest

# scipy.stats runs scipy.stats._stats_py when it executes; lazily imported, it has not yet
LOADS_STATISTICS = "scipy.stats._stats_py"


@pytest.mark.parametrize("module", ["agentreward.cli", "trajectoryhub.cli"])
def test_importing_the_cli_loads_no_statistics(module):
    script = f"import sys, {module}\nprint({LOADS_STATISTICS!r} in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_statistic_still_loads_them_when_computed():
    script = (
        "import sys\nfrom trajectoryhub.stats import wilson_interval\n"
        "wilson_interval(3, 10)\n"
        "from agentreward.quality import roc_auc\n"
        f"print(roc_auc([0.1, 0.9], [False, True]), {LOADS_STATISTICS!r} in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1.0", "True"]
