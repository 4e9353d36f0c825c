"""Config dataclasses: YAML loading, overrides, validation messages, flat keys over groups."""

import dataclasses
import doctest

import pytest

import agenttrainer.config
from agenttrainer.config import (
    ConfigError,
    DPOConfig,
    GRPOConfig,
    OnlineRLConfig,
    PRMConfig,
    RetrieverConfig,
    SFTConfig,
)

CONFIGS = (SFTConfig, DPOConfig, GRPOConfig, OnlineRLConfig, PRMConfig, RetrieverConfig)


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen2.5-Coder-7B\ntrain_file: sft.jsonl\nnum_epochs: 3\nbatch_size: 4\n"
        "learning_rate: 2e-5\nmax_length: 4096\nbf16: true\nuse_lora: true\nagent_format: true\n"
        "mask_observations: true\nstep_weighted_loss: true\ncurriculum: true\n"
    )
    config = SFTConfig.from_yaml(path, batch_size=8, learning_rate=None)
    assert config.batch_size == 8 and config.learning_rate == 2e-5  # None means "flag not given"
    assert config.lora.use_lora and config.selection.curriculum and config.step_weighted_loss
    assert config.max_length == 4096


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda cls: cls.__name__)
def test_every_field_is_documented_and_no_config_has_more_than_45_fields(cls):
    assert all(cls.field_help().values()), [name for name, text in cls.field_help().items() if not text]
    assert len(dataclasses.fields(cls)) <= 45  # related fields go into a group (config.online.Sampling, ...)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda cls: cls.__name__)
def test_a_config_round_trips_through_its_flat_keys(cls):
    config = cls()
    flat = config.to_dict()
    assert list(flat) == list(cls.flat_keys())
    assert cls.from_dict(flat) == config


def test_a_flat_key_lands_in_its_group_and_a_subclass_default_keeps_the_base_help():
    config = OnlineRLConfig.from_dict({"temperature": "0.5", "use_lora": True, "vf_coef": 0.1, "max_steps": 3})
    assert (config.sampling.temperature, config.lora.use_lora, config.ppo.vf_coef, config.max_steps) == (
        0.5,
        True,
        0.1,
        3,
    )
    assert config.value("temperature") == 0.5 and config.to_dict()["temperature"] == 0.5
    assert DPOConfig.field_help()["learning_rate"] == SFTConfig.field_help()["learning_rate"]
    assert (DPOConfig().learning_rate, SFTConfig().learning_rate) == (5e-6, 2e-5)


def test_max_steps_counts_episode_steps_and_the_optimizer_steps_have_their_own_key():
    for cls in (SFTConfig, DPOConfig, GRPOConfig, PRMConfig, RetrieverConfig):
        assert "max_optimizer_steps" in cls.flat_keys() and "max_steps" not in cls.flat_keys(), cls
    assert {"max_steps", "max_optimizer_steps"} <= set(OnlineRLConfig.flat_keys())
    with pytest.raises(ConfigError, match=r"unknown SFTConfig field\(s\) \['max_steps'\]"):
        SFTConfig.from_dict({"max_steps": 3})


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (SFTConfig, {"batch_size": 0}, "batch_size must be positive, got 0"),
        (SFTConfig, {"lr_scheduler": "step"}, "lr_scheduler must be one of"),
        (SFTConfig, {"report_to": ["mlflow"]}, "report_to accepts"),
        (SFTConfig, {"coreset_strategy": "best"}, "coreset_strategy must be one of"),
        (SFTConfig, {"curriculum_start_ratio": 0}, "curriculum_start_ratio must be in"),
        (SFTConfig, {"early_stopping_patience": 2}, "early_stopping_patience needs an eval_file"),
        (DPOConfig, {"loss_type": "kto"}, "loss_type must be one of"),
        (
            DPOConfig,
            {"loss_type": "ipo", "label_smoothing": 0.1},
            "label_smoothing applies to loss_type 'sigmoid' only",
        ),
        (DPOConfig, {"beta": 0}, "beta must be positive"),
        (GRPOConfig, {"group_size": 1}, "group_size must be >= 2"),
        (GRPOConfig, {"clip_eps": 1.5}, "clip_eps must be in"),
        (GRPOConfig, {"eval_file": "e.jsonl"}, "GRPO does not evaluate during training"),
    ],
)
def test_bad_values_raise_one_line_errors(cls, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        cls.from_dict(kwargs)


def test_unknown_yaml_key_and_bad_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train_file: a.jsonl\nbatchsize: 4\n")
    with pytest.raises(ConfigError, match=r"unknown SFTConfig field\(s\) \['batchsize'\]"):
        SFTConfig.from_yaml(path)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        SFTConfig.from_yaml(path)
    with pytest.raises(ConfigError, match="missing.yaml: no such file or directory"):
        SFTConfig.from_yaml(tmp_path / "missing.yaml")


def test_report_to_from_comma_string():
    assert SFTConfig(report_to="wandb,tensorboard").report_to == ["wandb", "tensorboard"]


def test_the_package_example_runs():
    result = doctest.testmod(agenttrainer.config)
    assert result.attempted > 0 and result.failed == 0
