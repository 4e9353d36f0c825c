"""Issue #11, findings 7, 8 and 11 (trainer): hostile or broken data files.

* 7: NaN/Infinity in any number is refused by every reader (``path:line: field: problem``), and
  a training loop never takes an optimizer step on a non-finite loss (nor saves its weights).
* 8: every record is read and checked before a model is loaded, and a line longer than the
  bound (``KNOWLYR_MAX_LINE_BYTES``) is refused without reading all of it.
* 11: UTF-16 and binary files, JSON nested 100,000 deep and empty files are one-line errors
  with exit status 2, never a traceback or a silent success.
"""

import json
import math
import sys
import tracemalloc
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from agenttrainer.cli import cli
from agenttrainer.config import DPOConfig, GRPOConfig, SFTConfig
from agenttrainer.data import DataError, grpo_group, read_located_records, sft_conversation
from agenttrainer.trainers.dpo import DPOTrainer
from agenttrainer.trainers.grpo import GRPOTrainer
from agenttrainer.trainers.guards import NonFiniteLossError, check_finite
from agenttrainer.trainers.sft import SFTTrainer

COMMON = ["--num-epochs", "1", "--batch-size", "2", "--no-bf16", "--no-progress-bar"]


def _cli(args):
    return CliRunner().invoke(cli, args)


def _one_line_error(result, expected, code=2):
    """Exit ``code`` (2: bad input, 1: failed while running) with ``expected`` in the one
    ``error:`` line, no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], result.output


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if anything loads a model."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the data was checked")

    monkeypatch.setattr("agenttrainer.models.load_model_and_tokenizer", refuse)


# ------------------------------------------------------------------- 7: NaN / Infinity


@pytest.mark.parametrize(
    ("literal", "field"),
    [
        ("NaN", "trajectories[1].reward"),
        ("Infinity", "trajectories[1].reward"),
        ("-Infinity", "trajectories[1].reward"),
        ("1e400", "trajectories[1].reward"),
    ],
)
def test_security_grpo_nan_reward_is_refused_by_the_cli(tmp_path, tiny_path, rows, literal, field):
    """Before: exit 0 and every saved tensor NaN. After: exit 1 naming file, line and field."""
    data = rows.grpo(3)
    lines = [json.dumps(r) for r in data]
    lines[2] = lines[2].replace(f'"reward": {data[2]["trajectories"][1]["reward"]!r}', f'"reward": {literal}', 1)
    assert literal in lines[2]
    path = tmp_path / "grpo.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = _cli(["grpo", "--train-file", str(path), "--model", tiny_path, "--output-dir", str(out), *COMMON])
    _one_line_error(result, f"{path}:3: {field}: non-finite number")
    assert not (out / "final").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"instruction": "t", "response": "r", "reward": NaN}', ":1: reward: non-finite number (NaN)"),
        (
            '{"instruction": "t", "steps": [{"action": "a", "reward": -Infinity}]}',
            ":1: steps[0].reward: non-finite number (-Infinity)",
        ),
        ('{"instruction": "t", "response": "r", "metadata": {"loss": 1e999}}', ":1: metadata.loss: non-finite number"),
        ('{"instruction": "t", "response": "r", "reward": 1' + "0" * 400 + "}", ":1: reward: number too large"),
        ('{"prompt": "p", "chosen": "c", "rejected": "r", "extra": [NaN]}', ":1: extra[0]: non-finite number"),
    ],
)
def test_security_readers_refuse_non_finite_numbers(tmp_path, line, message):
    path = tmp_path / "d.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DataError) as err:
        for where, record in read_located_records(path):
            sft_conversation(record, where)
    assert str(err.value).startswith(f"{path}{message}")


def test_security_in_memory_records_refuse_non_finite_numbers():
    """Records that do not come from a file (replay buffer, API callers) are checked too."""
    with pytest.raises(DataError, match=r"^m:1: reward: not a finite number \(nan\)"):
        sft_conversation({"instruction": "t", "response": "r", "reward": math.nan}, "m:1")
    with pytest.raises(DataError, match=r"^m:1: trajectories\[0\].step_rewards\[1\]: not a finite number \(inf\)"):
        grpo_group(
            {"prompt": "p", "trajectories": [{"response": "x", "reward": 1.0, "step_rewards": [1.0, math.inf]}]}, "m:1"
        )
    with pytest.raises(DataError, match=r"^m:1: steps\[\*\].reward: rewards too large"):
        sft_conversation({"instruction": "t", "steps": [{"action": "a", "reward": 1e308}] * 2}, "m:1")


def test_security_grpo_rewards_that_overflow_the_advantage_are_refused(tmp_path, rows, tiny):
    data = rows.grpo(2)
    data[1]["trajectories"][0]["reward"] = 1e300  # finite, but inf as a float32 reward
    path = rows.write(tmp_path / "g.jsonl", data)
    config = GRPOConfig(train_file=str(path), output_dir=str(tmp_path / "o"), progress_bar=False, bf16=False)
    with pytest.raises(DataError, match=rf"^{path}:2: trajectories\[\*\].reward: rewards too large to normalise"):
        GRPOTrainer(config, model=tiny[0], tokenizer=tiny[1])


def test_security_check_finite_refuses_nan_and_inf():
    check_finite(1, 0.5, torch.tensor(2.0))
    with pytest.raises(NonFiniteLossError, match=r"^step 7: loss is nan; stopped before the optimizer step"):
        check_finite(7, float("nan"))
    with pytest.raises(NonFiniteLossError, match=r"^step 2: loss is inf"):
        check_finite(2, float("inf"), 1.0)
    with pytest.raises(NonFiniteLossError, match=r"^step 3: gradient norm is inf"):
        check_finite(3, 0.5, torch.tensor(float("inf")))


def _nan_model(tiny):
    model, tok = tiny
    with torch.no_grad():
        model.get_output_embeddings().weight[0, 0] = float("nan")
    return model, tok


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo"])
def test_security_nan_loss_stops_before_the_optimizer_step(tmp_path, tiny, sft_file, dpo_file, grpo_file, method):
    """Before: training ran on, and ``final/`` held NaN weights. After: stop at step 1, save nothing."""
    model, tok = _nan_model(tiny)
    cls, config_cls, path = {
        "sft": (SFTTrainer, SFTConfig, sft_file),
        "dpo": (DPOTrainer, DPOConfig, dpo_file),
        "grpo": (GRPOTrainer, GRPOConfig, grpo_file),
    }[method]
    out = tmp_path / "out"
    config = config_cls(
        train_file=path, output_dir=str(out), num_epochs=1, batch_size=2, progress_bar=False, bf16=False, save_steps=1
    )
    with pytest.raises(NonFiniteLossError, match=r"^step 1: loss is nan"):
        cls(config, model=model, tokenizer=tok).train()
    assert not (out / "final").exists()
    assert not list(out.glob("checkpoint-*"))


def test_security_nan_loss_is_a_one_line_cli_error(tmp_path, tiny, sft_file):
    from agenttrainer.models import save_model

    model, tok = _nan_model(tiny)
    model_dir = save_model(model, tok, tmp_path / "nan-model")
    out = tmp_path / "out"
    result = _cli(["sft", "--train-file", sft_file, "--model", str(model_dir), "--output-dir", str(out), *COMMON])
    _one_line_error(result, "step 1: loss is nan; stopped before the optimizer step", code=1)
    assert not (out / "final").exists()


# ------------------------------------------------------------------- 8: data before model, line length


def _bad_last_line(tmp_path, rows, method):
    good = {"sft": rows.sft, "dpo": rows.dpo, "grpo": rows.grpo, "eval": rows.sft}[method](6)
    path = tmp_path / f"{method}.jsonl"
    lines = [json.dumps(r) for r in good]
    last = {k: v for k, v in good[-1].items() if k != "reward"}
    lines.append(json.dumps(last)[:-1] + ', "reward": NaN}')
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo", "eval"])
def test_security_bad_last_line_fails_before_the_model_loads(tmp_path, rows, no_model_load, method):
    """Before: the model loaded first (a minute for a real one), so here the loader's error came first."""
    path = _bad_last_line(tmp_path, rows, method)
    model = str(tmp_path / "no-such-model")
    if method == "eval":
        args = ["eval", "--eval-file", str(path), "--model", model]
    else:
        args = [method, "--train-file", str(path), "--model", model, "--output-dir", str(tmp_path / "o"), *COMMON]
    _one_line_error(_cli(args), f"{path}:7: reward: non-finite number (NaN)")


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_security_bad_eval_file_fails_before_the_model_loads(tmp_path, rows, no_model_load, sft_file, dpo_file, method):
    train = sft_file if method == "sft" else dpo_file
    bad = _bad_last_line(tmp_path, rows, method)
    args = [method, "--train-file", train, "--eval-file", str(bad), "--model", str(tmp_path / "none"), *COMMON]
    _one_line_error(_cli([*args, "--output-dir", str(tmp_path / "o")]), f"{bad}:7: reward: non-finite number")


def test_security_long_line_is_refused_without_reading_it_whole(tmp_path, monkeypatch, rows):
    """A 4 MB line with a 1 MiB bound: refused with O(bound) memory (the buffered reader joins its
    chunks, so about twice the bound), not the line's size (a 4 MB line, its text and its parse).

    Before: the whole line was read and parsed (a 200 MB line took 15 GB in ``sft``).
    """
    limit = 1 << 20
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", str(limit))
    path = tmp_path / "long.jsonl"
    with path.open("w") as fh:
        fh.write(json.dumps(rows.sft(1)[0]) + "\n")
        fh.write(json.dumps({"instruction": "t", "response": "x" * (4 << 20)}) + "\n")
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=rf"^{path}:2: line longer than {limit} bytes"):
            list(read_located_records(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit, f"peak {peak} bytes while refusing a line over {limit} bytes"


def test_security_line_length_bound_is_exact_and_configurable(tmp_path, monkeypatch):
    path = tmp_path / "d.jsonl"
    record = json.dumps({"instruction": "t", "response": "r"})
    path.write_text(record + "\n" + record)  # the last line has no newline
    assert len(list(read_located_records(path, max_line_bytes=len(record)))) == 2
    with pytest.raises(DataError, match=rf"^{path}:1: line longer than {len(record) - 1} bytes"):
        list(read_located_records(path, max_line_bytes=len(record) - 1))
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", "lots")
    with pytest.raises(DataError, match="KNOWLYR_MAX_LINE_BYTES: expected a positive number of bytes, got 'lots'"):
        list(read_located_records(path))


def test_security_long_line_is_a_one_line_cli_error(tmp_path, monkeypatch, no_model_load):
    monkeypatch.setenv("KNOWLYR_MAX_LINE_BYTES", "1000")
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"instruction": "t", "response": "x" * 5000}) + "\n")
    result = _cli(["sft", "--train-file", str(path), "--model", str(tmp_path / "none"), *COMMON])
    _one_line_error(result, f"{path}:1: line longer than 1000 bytes")


# ------------------------------------------------------------------- 11: encodings, nesting, empty files


def _sft_cli(path, tmp_path):
    return _cli(["sft", "--train-file", str(path), "--model", str(tmp_path / "none"), *COMMON])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"a": 1}\n'.encode("utf-16"), ":1: the file is UTF-16 text"),
        (b'{"a": "\xe9"}\n', ":1: not UTF-8 text (byte 7)"),
        (b"[" * 100_000 + b"]" * 100_000, ":1: nested deeper than 100 levels"),
        pytest.param(
            b'{"a": 1' + b"0" * 5000 + b"}",
            ":1: invalid JSON",
            marks=pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"), reason="no int digit limit"),
        ),
        (b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}", ":1: nested deeper than 100 levels"),
    ],
)
def test_security_reader_errors_are_data_errors(tmp_path, content, message):
    """Before: UnicodeDecodeError / RecursionError out of the reader, i.e. a traceback in every command."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError) as err:
        list(read_located_records(path))
    assert str(err.value).startswith(f"{path}{message}")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_security_utf16_file_is_a_one_line_error(tmp_path, rows, no_model_load, encoding):
    path = tmp_path / "utf16.jsonl"
    path.write_bytes("\n".join(json.dumps(r) for r in rows.sft(3)).encode(encoding))
    expected = "the file is UTF-16 text" if encoding == "utf-16" else f"{path}:1:"
    _one_line_error(_sft_cli(path, tmp_path), expected)


def test_security_binary_file_is_a_one_line_error(tmp_path, no_model_load):
    path = tmp_path / "model.bin"
    path.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(128, 256)) * 64)  # a gzip header, then no UTF-8
    _one_line_error(_sft_cli(path, tmp_path), f"{path}:1: not UTF-8 text")


def test_security_utf8_bom_is_accepted(tmp_path, rows):
    path = tmp_path / "bom.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows.sft(2)), encoding="utf-8-sig")
    assert len(list(read_located_records(path))) == 2


@pytest.mark.parametrize("where", ["record", "field"])
def test_security_deeply_nested_json_is_a_one_line_error(tmp_path, no_model_load, where):
    """Before: RecursionError traceback. 100,000 levels, as a whole line or inside a field."""
    nested = "[" * 100_000 + "]" * 100_000
    line = nested if where == "record" else '{"instruction": "t", "response": "r", "metadata": ' + nested + "}"
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps({"instruction": "t", "response": "r"}) + "\n" + line + "\n")
    _one_line_error(_sft_cli(path, tmp_path), f"{path}:2: nested deeper than 100 levels")


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo", "eval"])
@pytest.mark.parametrize("content", ["", "\n  \n\n"])
def test_security_empty_file_is_an_error(tmp_path, no_model_load, method, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    model = str(tmp_path / "none")
    if method == "eval":
        args = ["eval", "--eval-file", str(path), "--model", model]
    else:
        args = [method, "--train-file", str(path), "--model", model, "--output-dir", str(tmp_path / "o"), *COMMON]
    result = _cli(args)
    _one_line_error(result, f"{path}: no ")
    assert not Path(tmp_path / "o" / "final").exists()
