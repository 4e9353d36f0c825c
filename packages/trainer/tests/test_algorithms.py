"""The algorithm registry: one module per algorithm, looked up by name by every GRPO driver."""

import json
import math

import pytest

from agenttrainer import algorithms
from agenttrainer.algorithms import registry
from agenttrainer.algorithms.grpo import grpo_loss
from agenttrainer.config import ConfigError, GRPOConfig
from agenttrainer.trainers.grpo import GRPOTrainer

REWARDS = [1.0, 0.0, 0.0, 1.0]


def test_every_algorithm_is_registered_with_its_advantages_by_hand():
    """Rewards [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735. grpo: +-0.5 /
    0.57745 = +-0.86588; dr_grpo: +-0.5; rloo: 1 - 1/3 and 0 - 2/3; rft: the successes; the
    masked fourth member is left out of the statistics and gets 0 (rloo: [1, 0, 0] -> 2/3 * 1.5 * ...)."""
    assert {"grpo", "dr_grpo", "rloo", "ppo", "rft"} <= set(algorithms.algorithm_names())
    assert set(algorithms.algorithm_names(offline=True)) >= {"grpo", "dr_grpo", "rloo"}
    assert not {"ppo", "rft"} & set(algorithms.algorithm_names(offline=True))
    successes, valid = [True, False, None, True], [True] * 4

    def adv(name, v=valid):
        return algorithms.get_algorithm(name).advantages(REWARDS, successes, v)

    assert adv("grpo") == pytest.approx([0.86588, -0.86588, -0.86588, 0.86588], abs=1e-5)
    assert adv("dr_grpo") == [0.5, -0.5, -0.5, 0.5]
    assert adv("rloo") == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert adv("rft") == [1.0, 0.0, 0.0, 1.0]
    # the last member masked: mean of [1, 0, 0] is 1/3; rloo scales by 3/2
    assert adv("rloo", [True, True, True, False]) == pytest.approx([1.0, -0.5, -0.5, 0.0])
    assert algorithms.get_algorithm("ppo").advantages is None and algorithms.get_algorithm("ppo").value_head
    assert {n: algorithms.get_algorithm(n).normalization for n in ("grpo", "dr_grpo", "rloo", "ppo", "rft")} == {
        "grpo": "sequence",
        "dr_grpo": "constant",
        "rloo": "sequence",
        "ppo": "token",
        "rft": "token",
    }


def test_unknown_and_duplicate_names_are_refused():
    with pytest.raises(ValueError, match=r"algorithm must be one of \(.*'grpo'.*\), got 'a2c'"):
        algorithms.get_algorithm("a2c")
    copy = registry.Algorithm("grpo", "another", grpo_loss, registry.baseline_advantages)
    with pytest.raises(ValueError, match="already registered"):
        algorithms.register_algorithm(copy)
    with pytest.raises(ValueError, match="needs a value head"):
        registry.Algorithm("x", "no advantages", grpo_loss, None)
    with pytest.raises(ValueError, match="normalization"):
        registry.Algorithm("x", "", grpo_loss, registry.baseline_advantages, normalization="mean")


def test_offline_grpo_takes_the_algorithm_and_refuses_online_only_ones(tmp_path, tiny, grpo_file):
    """rloo offline: each group's advantages are the leave-one-out ones of its rewards."""
    model, tok = tiny
    config = GRPOConfig(
        train_file=grpo_file, output_dir=str(tmp_path), algorithm="rloo", bf16=False, progress_bar=False
    )
    trainer = GRPOTrainer(config, model=model, tokenizer=tok)
    for convs, adv in trainer.read_groups(grpo_file):
        rewards = [c.reward for c in convs]
        expected = [r - (sum(rewards) - r) / (len(rewards) - 1) for r in rewards]
        assert adv == pytest.approx(expected)
    for name in ("ppo", "rft"):
        with pytest.raises(
            ConfigError, match=f"algorithm {name} learns from episodes played during training.*--online"
        ):
            GRPOConfig(train_file=grpo_file, algorithm=name)
    with pytest.raises(ConfigError, match="algorithm must be one of"):
        GRPOConfig(train_file=grpo_file, algorithm="a2c")


def one_step_config(grpo_file, tmp_path, **fields):
    """An offline run of one optimizer step on ``grpo_file``, in fp32 and quiet, with no KL term
    (so no reference model is loaded); ``fields`` set the rest."""
    return GRPOConfig(
        train_file=grpo_file,
        output_dir=str(tmp_path / "out"),
        kl_coef=0.0,
        max_optimizer_steps=1,
        bf16=False,
        progress_bar=False,
        **fields,
    )


def test_offline_grpo_passes_every_loss_option_to_the_algorithm(tmp_path, tiny, grpo_file, monkeypatch):
    """A registered algorithm is all a driver needs: one registered here sees the config's clip
    range (clip-higher included), KL weight, normalization and token budget."""
    seen = []

    def probe_loss(*args, **options):
        seen.append(options)
        return grpo_loss(*args, **options)

    probe = registry.Algorithm(
        "probe", "test", probe_loss, algorithms.get_algorithm("grpo").advantages, normalization="token"
    )
    monkeypatch.setitem(registry._ALGORITHMS, "probe", probe)
    model, tok = tiny
    config = one_step_config(grpo_file, tmp_path, algorithm="probe", clip_eps=0.1, clip_eps_high=0.3, max_length=256)
    result = GRPOTrainer(config, model=model, tokenizer=tok).train()
    assert result["global_step"] == 1 and seen
    options = seen[0]
    assert (options["clip_eps"], options["clip_eps_high"], options["kl_coef"]) == (0.1, 0.3, 0.0)
    assert (options["normalization"], options["max_tokens"]) == ("token", 256)
    assert options["num_items"] > 10  # completion tokens of the step, not trajectories


def test_cli_offers_the_registered_algorithms(tmp_path, grpo_file):
    from click.testing import CliRunner

    from agenttrainer.cli import cli

    shown = CliRunner().invoke(cli, ["grpo", "--help"]).output
    assert f"--algorithm [{'|'.join(algorithms.algorithm_names())}]" in shown
    bad = CliRunner().invoke(cli, ["grpo", "--train-file", grpo_file, "--algorithm", "a2c"])
    assert bad.exit_code == 2 and "'a2c' is not one of" in bad.output
    online_only = CliRunner().invoke(cli, ["grpo", "--train-file", grpo_file, "--algorithm", "ppo"])
    assert online_only.exit_code == 2 and "--online" in online_only.output


def test_dr_grpo_offline_sums_token_losses_over_max_length(tmp_path, tiny, grpo_file):
    """dr_grpo offline: advantages r - mean, and each trajectory's token losses over the same
    budget (max_length); the first step's loss is then sum_i A_i * (-n_i) / max_length / G per
    group with ratio 1 (no KL): the policy-gradient term at the sampling policy."""
    model, tok = tiny
    config = one_step_config(
        grpo_file,
        tmp_path,
        algorithm="dr_grpo",
        batch_size=1,
        max_length=300,
        logging_steps=1,
        step_level_advantage=False,
        warmup_ratio=0.0,
    )
    trainer = GRPOTrainer(config, model=model, tokenizer=tok)
    groups = trainer.load_groups(grpo_file)
    trainer.train()
    logged = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    loss = next(row["loss/train"] for row in logged if "loss/train" in row)
    candidates = []  # the first batch is one of the groups (seeded shuffle)
    for group in groups:
        rewards = [ex.meta["reward"] for ex in group]
        mean = sum(rewards) / len(rewards)
        tokens = [sum(1 for lab in ex.labels[1:] if lab != -100) for ex in group]
        candidates.append(sum(-(r - mean) * n / 300 for r, n in zip(rewards, tokens)) / len(group))
    assert any(math.isclose(loss, c, rel_tol=1e-4, abs_tol=1e-7) for c in candidates)


def test_module_examples():
    import doctest

    for module in (algorithms, registry):
        assert doctest.testmod(module).failed == 0
