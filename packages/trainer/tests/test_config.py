"""Config dataclasses: YAML loading, overrides, validation messages."""

import pytest

from agenttrainer.config import ConfigError, DPOConfig, GRPOConfig, PRMConfig, SFTConfig


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen2.5-Coder-7B\ntrain_file: sft.jsonl\nnum_epochs: 3\nbatch_size: 4\n"
        "learning_rate: 2e-5\nmax_length: 4096\nbf16: true\nuse_lora: true\nagent_format: true\n"
        "mask_observations: true\nstep_weighted_loss: true\ncurriculum: true\n"
    )
    config = SFTConfig.from_yaml(path, batch_size=8, learning_rate=None)
    assert config.batch_size == 8 and config.learning_rate == 2e-5  # None means "flag not given"
    assert config.use_lora and config.curriculum and config.step_weighted_loss and config.max_length == 4096


def test_every_field_is_documented():
    for cls in (SFTConfig, DPOConfig, GRPOConfig, PRMConfig):
        assert all(cls.field_help().values()), cls


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
        cls(**kwargs)


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
