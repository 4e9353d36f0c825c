"""bf16 only where it is native: an emulated bf16 matmul is many times slower than fp32."""

import warnings

import pytest
import torch

import agenttrainer.precision as precision
from agenttrainer.config import SFTConfig
from agenttrainer.trainers.setup import make_accelerator

AVX2_EPYC = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


def test_cpuinfo_flags_decide_native_bf16():
    assert not precision.cpuinfo_has_native_bf16(AVX2_EPYC)
    assert precision.cpuinfo_has_native_bf16(SAPPHIRE)
    assert precision.cpuinfo_has_native_bf16(GRAVITON3)
    assert not precision.cpuinfo_has_native_bf16("")  # unknown: fp32, which is never wrong


def test_requested_bf16_falls_back_to_fp32_with_one_warning_where_it_is_emulated(monkeypatch, tmp_path):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    precision._warn_fallback.cache_clear()
    with pytest.warns(RuntimeWarning, match="no native bf16") as caught:
        assert precision.resolve_bf16(True, "cpu") is False
        assert precision.resolve_bf16(True, torch.device("cpu")) is False
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert precision.resolve_bf16(False, "cpu") is False  # not asked: nothing to say
    precision._warn_fallback.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert precision.resolve_bf16(True, "cpu", warn=False) is False  # a "where native" default: the caller says it
    config = SFTConfig(model_name_or_path="unused", train_file="unused.jsonl", output_dir=str(tmp_path), bf16=True)
    assert make_accelerator(config).mixed_precision == "no"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert precision.resolve_bf16(True, "cpu") is True
    assert make_accelerator(config).mixed_precision == "bf16"
