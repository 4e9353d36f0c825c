"""One error rule: every exception a knowlyr package defines for its callers derives from
knowlyr-core's ``KnowlyrError`` (as core's docstring promises), so one ``except`` catches them all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from knowlyrcore.errors import KnowlyrError
from knowlyrcore.testing import require_module

PACKAGES = ["knowlyrcore", "agentsandbox", "agentrecorder", "agentreward", "trajectoryhub", "agenttrainer"]
#: Raised and caught inside one module, never seen by a caller (control flow, not errors).
INTERNAL = {
    "agentrecorder.errors.FieldError",  # an adapter's bad value; the converter re-raises it as ConversionError
    "agentsandbox.shell.ShellError",  # the shell's transport died; the sandbox restarts it
    "agentsandbox.backends.cgroups.CgroupUnavailable",  # probing; the backend falls back to rlimits
    "agenttrainer.serving.limits.GenerationCancelled",  # stops a generation whose client left
}
#: Modules that need an optional extra (serve, mcp) or a GPU stack to import at all.
OPTIONAL = ("mcp_server", "serving.app", "serving.cli")


def defined_exceptions(package: str):
    root = require_module(package, f"{package} is installed by `make install`")
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.endswith(OPTIONAL):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
            ):
                yield f"{info.name}.{name}", value


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_error_is_a_knowlyr_error(package):
    stray = [
        name for name, cls in defined_exceptions(package) if name not in INTERNAL and not issubclass(cls, KnowlyrError)
    ]
    assert stray == [], f"derive these from KnowlyrError (or the package's base error): {stray}"
