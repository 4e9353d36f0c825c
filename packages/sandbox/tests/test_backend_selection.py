"""Which backend ``auto`` picks, and the errors when a backend cannot run (real probes)."""

import pytest

from agentsandbox import BackendUnavailable, SandboxConfig, available_backends, make_sandbox
from agentsandbox.backends import resolve_backend
from agentsandbox.testing import require_backend


@pytest.mark.integration
def test_auto_falls_back_to_local_without_a_daemon(monkeypatch, tmp_path):
    require_backend("local")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    ok, why = available_backends()["docker"]
    assert not ok and why.startswith(f"no Docker daemon reachable at unix://{tmp_path}/no-daemon.sock (")
    assert why.endswith("; set it up as root with: python -m agentsandbox.setup_docker")
    assert resolve_backend("auto") == "local"
    with make_sandbox("auto") as sandbox:
        assert sandbox.backend == "local"
        assert sandbox.run("echo ok").output == "ok\n"


@pytest.mark.integration
def test_missing_image_is_a_clear_error():
    require_backend("docker")
    sandbox = make_sandbox("docker", SandboxConfig(image="knowlyr/no-such-image:none"))
    with pytest.raises(BackendUnavailable, match=r"no-such-image.*python -m agentsandbox\.setup_docker"):
        sandbox.start()
    sandbox.close()


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="unknown sandbox backend 'podman'"):
        resolve_backend("podman")
