"""knowlyr-core must stay light: importing it (and its CLI) never pulls in torch."""

import subprocess
import sys


def test_import_does_not_load_heavy_modules():
    code = (
        "import sys, knowlyrcore, knowlyrcore.wrappers, knowlyrcore.cli;"
        "heavy = [m for m in ('torch', 'transformers', 'gymnasium', 'numpy') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
