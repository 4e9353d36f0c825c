"""The ``knowlyr-trainer`` CLI in-process (click's runner) on a tiny saved model."""

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from agenttrainer.cli import cli
from knowlyrcore.origin import install_command


def _run(args):
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result


def _last_json(output):
    return json.loads(output.strip().splitlines()[-1])


COMMON = ["--num-epochs", "1", "--batch-size", "2", "--no-bf16", "--no-progress-bar"]


def test_sft_from_yaml_with_flag_override(tmp_path, tiny_path, sft_file):
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model_name_or_path": tiny_path,
                "train_file": sft_file,
                "output_dir": str(tmp_path / "o"),
                "batch_size": 8,
                "num_epochs": 1,
                "bf16": False,
                "step_weighted_loss": True,
            }
        )
    )
    result = _run(
        ["sft", "--config", str(config), "--batch-size", "2", "--no-progress-bar", "--report-to", "tensorboard"]
    )
    assert result.exit_code == 0, result.output
    out = _last_json(result.stdout)
    assert out["global_step"] == 4  # 8 examples / batch 2 (the flag beat the YAML's 8)
    assert (Path(out["output_dir"]) / "model.safetensors").is_file()
    assert list((tmp_path / "o" / "tensorboard").iterdir())


@pytest.mark.parametrize(
    ("command", "flag", "value", "count_key", "count"),
    [("dpo", "--beta", "0.2", "num_pairs", 8), ("grpo", "--kl-coef", "0.1", "num_groups", 6)],
)
def test_dpo_and_grpo_commands(tmp_path, tiny_path, dpo_file, grpo_file, command, flag, value, count_key, count):
    train_file = {"dpo": dpo_file, "grpo": grpo_file}[command]
    argv = [command, "--train-file", train_file, "--model", tiny_path, flag, value, "--output-dir", str(tmp_path / "o")]
    result = _run([*argv, *COMMON])
    assert result.exit_code == 0, result.output
    assert _last_json(result.stdout)[count_key] == count


@pytest.mark.parametrize(
    ("kind", "keys"),
    [
        ("sft", {"eval/loss", "eval/perplexity", "eval/token_accuracy"}),
        ("dpo", {"eval/preference_accuracy", "eval/logp_margin"}),
        ("grpo", {"eval/top1_agreement", "eval/mean_token_logp"}),
    ],
)
def test_eval_detects_the_format(tiny_path, sft_file, dpo_file, grpo_file, kind, keys):
    path = {"sft": sft_file, "dpo": dpo_file, "grpo": grpo_file}[kind]
    result = _run(["eval", "--model", tiny_path, "--eval-file", path, "--no-bf16"])
    assert result.exit_code == 0, result.output
    metrics = _last_json(result.stdout)
    assert keys <= set(metrics)
    if kind == "sft":
        assert 0 <= metrics["eval/token_accuracy"] <= 1 and metrics["eval/loss"] > 0


def test_errors_are_one_line(tmp_path, tiny_path, rows):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows.sft(1)[0]) + "\n" + json.dumps({"instruction": "x", "steps": "nope"}) + "\n")
    result = _run(["sft", "--train-file", str(bad), "--model", tiny_path, "--output-dir", str(tmp_path / "o"), *COMMON])
    assert result.exit_code == 2
    assert result.output == f"error: {bad}:2: steps: Input should be a valid list\n"
    config = tmp_path / "c.yaml"
    config.write_text("train_file: a.jsonl\nlearning_rat: 1\n")
    result = _run(["sft", "--config", str(config)])
    assert result.exit_code == 2 and "unknown SFTConfig field(s) ['learning_rat']" in result.output
    result = _run(["sft", "--model", tiny_path])
    assert result.exit_code == 2 and "--train-file" in result.output
    result = _run(["dpo", "--train-file", "x.jsonl", "--loss-type", "kto"])
    assert result.exit_code == 2 and "loss_type must be one of" in result.output
    result = _run(["sft", "--train-file", "x.jsonl", "--task-weights", "[1]"])
    assert result.exit_code == 2 and "expected a JSON object" in result.output


def test_plain_install_without_the_serve_extra_runs_the_cli():
    """`pip install knowlyr-trainer` (no Starlette, no uvicorn): the CLI loads and `serve` names the extra."""
    import subprocess
    import sys

    blocked = "import sys; sys.modules['starlette'] = None; sys.modules['uvicorn'] = None; "
    run = "from agenttrainer.cli import main; raise SystemExit(main({args}))"
    listed = subprocess.run(
        [sys.executable, "-c", blocked + run.format(args="['--help']")], capture_output=True, text=True
    )
    assert listed.returncode == 0 and "serve" in listed.stdout, listed.stderr[-2000:]
    served = subprocess.run(
        [sys.executable, "-c", blocked + run.format(args="['serve', 'smollm2-135m']")], capture_output=True, text=True
    )
    assert served.returncode == 2 and "Traceback" not in served.stderr
    assert (
        served.stderr.strip()
        == f"error: serving needs the 'serve' extra: {install_command('knowlyr-trainer', 'serve')}"
    )


@pytest.mark.parametrize("command", ["sft", "dpo", "grpo"])
def test_security_config_errors_never_echo_the_file(tmp_path, command):
    """A host file passed as --config (YAML error, unknown keys) is named, never printed."""
    from click.testing import CliRunner

    from agenttrainer.cli import cli

    broken = tmp_path / "broken.yaml"
    broken.write_text('lr: [unclosed\n  "root:secret-hash-line"\n')
    keys = tmp_path / "keys.yaml"
    keys.write_text("root:secret-hash-line: 1\nlearning_rate: 0.1\n")
    for path in (broken, keys):
        result = CliRunner().invoke(cli, [command, "--config", str(path)])
        assert result.exit_code != 0 and str(path) in result.output
        assert "secret-hash-line" not in result.output, result.output


def test_the_known_noisy_future_warnings_are_hidden_by_the_cli_entry_only():
    import warnings

    from agenttrainer.console import quiet_library_warnings

    def shown(message, *, cli_entry):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            if cli_entry:
                quiet_library_warnings()  # what main() does first; importing the library does not
            warnings.warn(message, FutureWarning, stacklevel=1)
        return [str(w.message) for w in caught]

    noisy = "`past_key_values` is deprecated and will be removed in version 6.0.0 for `LlamaForCausalLM.generate`."
    assert shown(noisy, cli_entry=False) == [noisy]
    assert shown(noisy, cli_entry=True) == []
    assert shown("`is_gradient_checkpointing` is deprecated and will be removed in v6.", cli_entry=True) == []
    other = "Passing `tp_plan` directly to `from_pretrained` is deprecated"
    assert shown(other, cli_entry=True) == [other]  # anything else still shows
