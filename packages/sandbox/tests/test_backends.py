"""The standard backend suite (``agentsandbox.testing.SandboxConformance``) on both backends."""

import pytest

from agentsandbox.testing import SandboxConformance

pytestmark = pytest.mark.integration


class TestLocalBackend(SandboxConformance):
    backend = "local"


class TestDockerBackend(SandboxConformance):
    backend = "docker"
