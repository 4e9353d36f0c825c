"""`make bench-bfcl` (examples/bfcl.py): how it draws its tasks, and a reduced run start to finish.

The drawing tests load only the tokenizer; the run trains SmolLM2 for real (slow tier)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from knowlyrcore.testing import import_file, require_module

pytestmark = pytest.mark.integration

require_module("bfcl_eval", "bfcl-eval is not installed (make install installs it --no-deps)")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bfcl.py"


@pytest.fixture(scope="module")
def example():
    return import_file(EXAMPLE, "bfcl_example")


@pytest.fixture(scope="module")
def tokenizer():
    from agenttrainer.models.aliases import resolve_model_path
    from agenttrainer.models.loading import load_tokenizer

    return load_tokenizer(resolve_model_path("smollm2-135m"))


def test_category_counts_parse_and_bad_ones_are_one_line(example):
    assert example.per_category("simple_python=3, multiple=2") == {"simple_python": 3, "multiple": 2}
    for bad in ("simple_python", "simple_python=0", "simple_python=x", ""):
        with pytest.raises(Exception, match="category=count|no category"):
            example.per_category(bad)
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--per-category", "simple_python=-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "category=count" in out.stderr.strip().splitlines()[-1]


def test_test_sample_has_the_asked_categories_and_counts(example):
    from agentsandbox.suites import get_suite

    suite = get_suite("bfcl")
    tasks = example.sample_test(suite, {"simple_python": 5, "irrelevance": 3}, seed=1)
    assert [t["metadata"]["category"] for t in tasks] == ["simple_python"] * 5 + ["irrelevance"] * 3
    assert tasks == example.sample_test(suite, {"simple_python": 5, "irrelevance": 3}, seed=1)  # seeded
    assert tasks != example.sample_test(suite, {"simple_python": 5, "irrelevance": 3}, seed=2)
    with pytest.raises(SystemExit, match="'live_simple' is not a category"):
        example.sample_test(suite, {"live_simple": 1}, seed=1)


def test_train_and_rl_pools_are_disjoint_live_and_fit_the_prompt_bound(example, tokenizer):
    from agentsandbox.suites import get_suite

    suite = get_suite("bfcl")
    sft, rl, _ = example.sample_train(
        suite, tokenizer, {"live_simple": 6, "live_multiple": 3}, {"live_simple": 4}, max_tokens=600, seed=0
    )
    assert sorted(t["metadata"]["category"] for t in sft) == ["live_multiple"] * 3 + ["live_simple"] * 6
    assert [t["metadata"]["category"] for t in rl] == ["live_simple"] * 4
    assert not {t["id"] for t in sft} & {t["id"] for t in rl}
    assert all(example.prompt_tokens(tokenizer, suite.system_prompt, t) <= 600 for t in sft + rl)
    with pytest.raises(SystemExit, match="fit --max-prompt-tokens 50"):
        example.sample_train(suite, tokenizer, {"live_simple": 1}, {}, max_tokens=50, seed=0)


@pytest.mark.slow
def test_reduced_bfcl_bench_runs_and_reports_base_sft_rl(tmp_path):
    command = [
        sys.executable,
        str(EXAMPLE),
        "--workdir",
        str(tmp_path),
        "--per-category",
        "simple_python=3,multiple=2,irrelevance=1",
        "--train-per-category",
        "live_simple=4,live_irrelevance=1",
        "--rl-per-category",
        "live_simple=2",
        "--max-optimizer-steps",
        "1",
        "--rl-iterations",
        "1",
        "--rl-tasks-per-iteration",
        "1",
        "--rl-group-size",
        "2",
        "--max-new-tokens",
        "32",
        "--multi-turn-tasks",
        "1",
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    stages = {(s["name"], s["split"]): s for s in report["stages"]}
    assert {
        ("base", "test"),
        ("sft", "test"),
        ("rl", "test"),
        ("base", "multi-turn-test"),
        ("sft", "multi-turn-test"),
    } == set(stages)
    assert all(stages[name, "test"]["n"] == 6 for name in ("base", "sft", "rl"))
    assert report["test_per_category"] == {"simple_python": 3, "multiple": 2, "irrelevance": 1}
    assert {(c["a"], c["b"], c["split"]) for c in report["comparisons"]} >= {
        ("base", "sft", "test:simple_python+multiple"),
        ("sft", "rl", "test:simple_python+multiple"),
        ("base", "sft", "multi-turn-test"),
    }
    assert set(report["targets"]) >= {"sft_minus_base", "sft_minus_base_p", "sft_target_met", "rl_minus_sft"}
    table = report["tables"][0]
    assert table["header"][:2] == ["split", "category"]
    assert {row[1] for row in table["rows"] if row[0] == "test"} == {"simple_python", "multiple", "irrelevance"}
    sft = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert len(sft) == 5 and all(record["tools"] for record in sft)  # each episode's own functions
    for name in ("report.md", "report.html", "tasks/rl.jsonl", "eval/rl-test.jsonl"):
        assert (tmp_path / name).is_file(), name
