"""resolve_model_path: aliases, local directories, Hub ids and clear errors for bad paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttrainer.models import MODEL_ALIASES, ModelLoadError, cache_root, resolve_model_path
from agenttrainer.models.aliases import embedded_model_dir, lookup_alias


def test_local_directory_resolves_to_its_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("ckpt") == str(tmp_path / "ckpt")
    assert resolve_model_path(tmp_path / "ckpt") == str(tmp_path / "ckpt")


def test_hub_ids_pass_through_unchanged():
    assert resolve_model_path("Qwen/Qwen2.5-Coder-7B") == "Qwen/Qwen2.5-Coder-7B"
    assert resolve_model_path("gpt2") == "gpt2"


@pytest.mark.parametrize("name", ["./missing", "/nowhere/at/all", "runs/sft/final", "~/no-such-ckpt"])
def test_missing_path_like_names_raise_a_readable_error(name):
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model_path(name)


def test_a_file_is_not_a_checkpoint(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="is a file"):
        resolve_model_path(str(weights))


def test_aliases_match_case_insensitively():
    assert lookup_alias("SmolLM2-135M-Instruct") is MODEL_ALIASES["smollm2-135m"]
    assert lookup_alias("SMOLLM2-135M") is MODEL_ALIASES["smollm2-135m"]
    assert lookup_alias("smollm2") is None


def test_cache_root_follows_knowlyr_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    assert embedded_model_dir(MODEL_ALIASES["smollm2-135m"]) == tmp_path / "models" / "smollm2-135m"
    monkeypatch.delenv("KNOWLYR_CACHE")
    assert cache_root() == Path.home() / ".cache" / "knowlyr"
