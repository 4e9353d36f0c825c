"""Where runs write and what they read: per-recipe output directories, the refusal to write over
the input model or another recipe's run, a run directory given as a model, the extras checked
before anything loads, fp16, ``-h`` everywhere, and the content-keyed reference cache."""

import json
import logging
import sys

import pytest
import torch
from click.testing import CliRunner

from agenttrainer.cli import cli, main
from agenttrainer.config import ConfigError, DPOConfig, GRPOConfig, OnlineRLConfig, SFTConfig
from agenttrainer.config.run import LoRA
from agenttrainer.errors import MissingExtraError
from agenttrainer.models import build_tiny_model, load_model_and_tokenizer, save_model
from agenttrainer.trainers.dpo import DPOTrainer
from agenttrainer.trainers.output_dir import RUN_FILE
from agenttrainer.trainers.sft import SFTTrainer
from knowlyrcore.origin import install_command

FAST = {
    "num_epochs": 1,
    "max_optimizer_steps": 1,
    "batch_size": 2,
    "bf16": False,
    "progress_bar": False,
    "max_length": 256,
}


def test_each_recipe_defaults_to_its_own_output_dir():
    assert SFTConfig().output_dir == "./output/sft"
    assert DPOConfig().output_dir == "./output/dpo"
    assert GRPOConfig().output_dir == "./output/grpo"
    assert OnlineRLConfig().output_dir == "./output/grpo"
    assert DPOConfig(output_dir="runs/x").output_dir == "runs/x"


def test_the_seed_chain_sft_then_dpo_from_output_sft_final_keeps_both(
    tmp_path, monkeypatch, tiny_path, sft_file, dpo_file
):
    """README's chain with every default: sft writes ./output/sft, dpo reads ./output/sft/final and writes ./output/dpo."""
    monkeypatch.chdir(tmp_path)
    sft = SFTTrainer(SFTConfig(model_name_or_path=tiny_path, train_file=sft_file, **FAST)).train()
    assert sft["output_dir"] == "output/sft/final"
    before = (tmp_path / "output/sft/final/model.safetensors").read_bytes()
    dpo = DPOTrainer(DPOConfig(model_name_or_path="./output/sft/final", train_file=dpo_file, **FAST)).train()
    assert dpo["output_dir"] == "output/dpo/final"
    assert (tmp_path / "output/sft/final/model.safetensors").read_bytes() == before
    assert json.loads((tmp_path / "output/sft" / RUN_FILE).read_text()) == {"recipe": "sft"}
    assert json.loads((tmp_path / "output/dpo" / RUN_FILE).read_text()) == {"recipe": "dpo"}


@pytest.mark.parametrize("output_dir", ["run", "run/final", "."])
def test_an_output_dir_holding_the_input_model_is_refused_before_loading(tmp_path, monkeypatch, dpo_file, output_dir):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run" / "final").mkdir(parents=True)  # no weights: the refusal must come before any load
    result = CliRunner().invoke(
        cli, ["dpo", "--model", "./run/final", "--train-file", dpo_file, "--output-dir", output_dir]
    )
    assert result.exit_code == 2
    assert result.output == (
        f"error: output_dir {output_dir} holds the input model ./run/final; training would write over it "
        "(pass another --output-dir, e.g. ./output/dpo)\n"
    )
    with pytest.raises(ConfigError, match="holds the input model ./run/final"):
        DPOTrainer(
            DPOConfig(
                model_name_or_path=str(tmp_path),
                ref_model_name_or_path="./run/final",
                train_file=dpo_file,
                output_dir="run",
            )
        )


def test_another_recipes_run_is_kept_unless_overwrite_and_the_same_recipe_resumes(
    tmp_path, tiny_path, sft_file, dpo_file
):
    out = str(tmp_path / "shared")
    SFTTrainer(
        SFTConfig(model_name_or_path=tiny_path, train_file=sft_file, output_dir=out, save_steps=1, **FAST)
    ).train()
    result = CliRunner().invoke(cli, ["dpo", "--model", tiny_path, "--train-file", dpo_file, "--output-dir", out])
    assert result.exit_code == 2
    assert result.output == (
        f"error: output_dir {out} holds a sft run; pass another --output-dir (default ./output/dpo) "
        "or --overwrite to write this dpo run there\n"
    )
    # the same recipe writes there again: resuming from its latest checkpoint continues at step 1
    resumed = SFTTrainer(
        SFTConfig(
            model_name_or_path=tiny_path,
            train_file=sft_file,
            output_dir=out,
            resume_from_checkpoint="latest",
            **{**FAST, "max_optimizer_steps": 2},
        )
    ).train()
    assert resumed["global_step"] == 2
    result = CliRunner().invoke(
        cli,
        [
            "dpo",
            "--model",
            tiny_path,
            "--train-file",
            dpo_file,
            "--output-dir",
            out,
            "--overwrite",
            "--max-optimizer-steps",
            "1",
            "--no-bf16",
            "--no-progress-bar",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "shared" / RUN_FILE).read_text()) == {"recipe": "dpo"}


def test_a_run_directory_given_as_the_model_loads_its_final_model_and_says_so_once(tmp_path, monkeypatch):
    model, tokenizer = build_tiny_model(seed=3)
    save_model(model, tokenizer, tmp_path / "run" / "final")
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    # A handler of our own on the module's logger: what reaches it does not depend on how other
    # tests (or main()) configured propagation and capture of the package logger.
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    logger = logging.getLogger("agenttrainer.models.aliases")
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: it also clears the logger's enabled-for cache
    logger.addHandler(handler)
    try:
        loaded, _ = load_model_and_tokenizer(str(tmp_path / "run"))
        load_model_and_tokenizer(str(tmp_path / "run"))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    said = [r.getMessage() for r in records if "training run directory" in r.getMessage()]
    assert said == [
        f"{tmp_path / 'run'} is a training run directory; loading its final model {tmp_path / 'run' / 'final'}"
    ]


def test_lora_without_peft_names_the_extra_before_loading_anything(tmp_path, monkeypatch, sft_file, capsys):
    monkeypatch.setitem(sys.modules, "peft", None)  # as if peft were not installed
    config = SFTConfig(
        model_name_or_path=str(tmp_path / "no-such-model"),
        train_file=sft_file,
        lora=LoRA(use_lora=True),
        output_dir=str(tmp_path / "o"),
    )
    with pytest.raises(MissingExtraError):  # not ModelLoadError: nothing was loaded
        SFTTrainer(config)
    code = main(
        [
            "sft",
            "--model",
            str(tmp_path / "no-such-model"),
            "--train-file",
            sft_file,
            "--use-lora",
            "--output-dir",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2
    assert (
        capsys.readouterr().err
        == f"error: use_lora needs the 'peft' extra: {install_command('knowlyr-trainer', 'peft')}\n"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_fp16_is_accepted_by_the_config_and_refused_in_one_line_on_the_cpu(tmp_path, sft_file, tiny_path, capsys):
    config = SFTConfig(train_file=sft_file, fp16=True)
    assert config.fp16 and not config.bf16  # one autocast dtype
    with pytest.raises(ConfigError, match="fp16=True needs a CUDA GPU"):
        SFTTrainer(
            SFTConfig(model_name_or_path=tiny_path, train_file=sft_file, fp16=True, output_dir=str(tmp_path / "o"))
        )
    assert (
        main(["sft", "--model", tiny_path, "--train-file", sft_file, "--fp16", "--output-dir", str(tmp_path / "o")])
        == 2
    )
    assert capsys.readouterr().err == (
        "error: fp16=True needs a CUDA GPU, and this run is on the CPU; use bf16=True (--bf16) where the CPU "
        "has native bf16, else fp32\n"
    )


def test_dash_h_works_for_the_group_and_every_subcommand():
    runner = CliRunner()
    result = runner.invoke(cli, ["-h"])
    assert result.exit_code == 0 and result.output.startswith("Usage:"), result.output
    for name, command in cli.commands.items():
        if not command.add_help_option:  # `mcp`: every argument is the MCP server's own
            continue
        result = runner.invoke(cli, [name, "-h"])
        assert result.exit_code == 0 and result.output.startswith("Usage:"), (name, result.output)


def test_the_reference_cache_is_keyed_by_content_not_path(tmp_path):
    """Model A saved at a path, its log-probs cached; model B saved at the same path: recomputed."""
    from agenttrainer.trainers.reference import cached_reference_logps
    from agenttrainer.trainers.setup import make_accelerator

    ref_path = tmp_path / "ref"
    config = DPOConfig(
        train_file="unused.jsonl", ref_model_name_or_path=str(ref_path), output_dir=str(tmp_path / "o"), bf16=False
    )
    accelerator = make_accelerator(config)
    ids = [[1, 2, 3, 4], [5, 6, 7]]
    computed = []

    def compute(ref):  # the real reference forward: summed log-probs of each sequence
        with torch.no_grad():
            out = []
            for seq in ids:
                x = torch.tensor([seq])
                hidden = ref(x, torch.arange(len(seq))[None], torch.zeros(1, len(seq), dtype=torch.long))
                out.append(hidden.float().sum())
        computed.append(torch.stack(out))
        return computed[-1]

    save_model(*build_tiny_model(seed=0), ref_path)
    first = cached_reference_logps(config, accelerator, None, "ref", ids, compute)
    again = cached_reference_logps(config, accelerator, None, "ref", ids, compute)
    assert len(computed) == 1 and torch.equal(first, again)  # same content: the cache is used
    save_model(*build_tiny_model(seed=1), ref_path)  # another model at the same path
    other = cached_reference_logps(config, accelerator, None, "ref", ids, compute)
    assert len(computed) == 2 and not torch.equal(first, other)


def test_the_seed_wrappers_check_the_output_dir_before_writing_into_it(tmp_path, tiny_path):
    """SFTTrainerWrapper writes its train.jsonl into output_dir: in another recipe's run it is
    refused first, and nothing lands there."""
    from agenttrainer.wrapper import GRPOTrainerWrapper, SFTTrainerWrapper

    run = tmp_path / "dpo-run"
    run.mkdir()
    (run / RUN_FILE).write_text(json.dumps({"recipe": "dpo"}))
    rows = [{"instruction": "say hi", "response": "hi"}]
    with pytest.raises(ConfigError, match="holds a dpo run"):
        SFTTrainerWrapper(tiny_path, rows, output_dir=str(run))
    with pytest.raises(ConfigError, match="holds a dpo run"):
        GRPOTrainerWrapper(tiny_path, [{"prompt": "say hi"}], reward_fn=lambda *a, **k: [0.0], output_dir=str(run))
    assert sorted(p.name for p in run.iterdir()) == [RUN_FILE]
