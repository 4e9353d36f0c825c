"""Report files: JSON shape, Markdown tables, self-contained HTML, PNG plots (and Chromium renders them)."""

import base64
import html
import json
import re
import shutil
import subprocess
import sys

import pytest

from knowlyrcore import Trajectory
from knowlyrcore.testing import require
from trajectoryhub.evaluate import compare_stages, summarize_stage
from trajectoryhub.report import headline, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BAR_RGB = (0x4C, 0x72, 0xB0)  # the success bars' colour
HEADLINE_RGB = (0xF4, 0xF7, 0xFC)  # the headline box's background


def run(agent, outcomes):
    return [
        Trajectory.model_validate(
            {
                "id": f"{agent}{i}",
                "agent": agent,
                "task": {
                    "id": f"t{i}",
                    "description": f"refund order #{i} <b>now</b>",
                    "metadata": {"solution": [{"tool": "get_order", "params": {}}, {"tool": "respond", "params": {}}]},
                },
                "steps": [
                    {
                        "index": 0,
                        "thought": "<script>alert('x')</script> look it up",
                        "tool_call": {"name": "get_order", "parameters": {"id": f"#{i}&"}},
                        "observation": {"output": "status: <delivered>", "error": "a & b"},
                        "duration_s": 0.25,
                    },
                    {
                        "index": 1,
                        "tool_call": {"name": "respond", "parameters": {"message": "done.\nAnything else?"}},
                        "observation": {"output": "x" * 5000},
                        "reward": 1.0 if ok else 0.0,
                    },
                ],
                "outcome": {"success": ok},
                "reward": 1.0 if ok else 0.0,
            }
        )
        for i, ok in enumerate(outcomes)
    ]


@pytest.fixture
def written(tmp_path):
    runs = {
        "base": run("base", [True, False, False, False, True, False]),
        "sft": run("sft", [True, True, True, False, True, True]),
    }
    report = {
        "stages": [summarize_stage(ts, name=name, split="test") for name, ts in runs.items()],
        "comparisons": compare_stages(runs, split="test"),
        "seconds": 12.5,
        "policy": "smollm2-135m",
    }
    curves = {
        "sft/loss": [(1, 2.0), (2, 1.5), (3, 1.1)],
        "dpo/loss": [(1, 0.69), (2, 0.6)],
        "grpo/reward": [(0, 0.2), (10, 0.5)],
    }
    files = write_report(report, tmp_path / "out", trajectories_by_stage=runs, curves=curves)
    return tmp_path / "out", files, report


def test_files_and_json_shape(written):
    out, files, _ = written
    assert sorted(p.name for p in out.iterdir()) == [
        "curve_loss.png",
        "curve_reward.png",
        "report.html",
        "report.json",
        "report.md",
        "success.png",
    ]
    assert set(files) == {"plot-success", "plot-curve-loss", "plot-curve-reward", "json", "markdown", "html"}
    for name in ("success.png", "curve_loss.png", "curve_reward.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    saved = json.loads((out / "report.json").read_text())
    assert saved["seconds"] == 12.5 and saved["policy"] == "smollm2-135m"
    assert [s["name"] for s in saved["stages"]] == ["base", "sft"]
    assert saved["stages"][1]["success_rate"] == pytest.approx(5 / 6)
    assert saved["comparisons"][0]["test"] == "mcnemar" and saved["comparisons"][0]["n_pairs"] == 6
    assert saved["plots"] == {
        "plot-success": "success.png",
        "plot-curve-loss": "curve_loss.png",
        "plot-curve-reward": "curve_reward.png",
    }
    assert saved["curves"]["sft/loss"] == [[1.0, 2.0], [2.0, 1.5], [3.0, 1.1]]


def test_markdown_tables(written):
    out, _, _ = written
    md = (out / "report.md").read_text()
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| stage |"))
    assert "success" in header and "95% CI" in header and "tool selection" in header
    sft_row = next(line for line in lines if line.startswith("| sft |"))
    assert "83.3%" in sft_row and "1.000 ± 0.000 (6)" in sft_row  # tool selection: every episode matched
    assert "| base → sft | 6 | +50.0% |" in md
    assert "![Success rate per stage with Wilson 95% intervals](success.png)" in md


def test_html_is_self_contained_and_escaped(written):
    out, _, _ = written
    page = (out / "report.html").read_text()
    images = re.findall(r'<img id="([^"]+)" alt="([^"]+)" src="data:image/png;base64,([^"]+)">', page)
    assert [i for i, _, _ in images] == ["plot-success", "plot-curve-loss", "plot-curve-reward"]
    assert base64.b64decode(images[0][2]) == (out / "success.png").read_bytes()
    assert 'src="http' not in page and "<link" not in page  # nothing fetched from anywhere
    assert '<table id="stages">' in page and '<table id="comparisons">' in page
    assert page.count('<section class="example">') == 2 and page.count('<ol class="steps">') == 2
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "refund order #0 &lt;b&gt;now&lt;/b&gt;" in page and "status: &lt;delivered&gt;" in page
    assert "error: a &amp; b" in page and "[3000 more chars]" in page  # long observations are cut


def test_headline_opens_both_reports(written):
    out, _, report = written
    expected = (
        "sft is ahead of base by +50.0 points (33.3% → 83.3%) on 6 paired test tasks, but the difference "
        "is not significant (McNemar p = 0.25; 3 tasks only sft solved, 0 only base): it may be chance."
    )
    assert headline(report) == expected
    assert (out / "report.md").read_text().startswith(f"# Evaluation report\n\n**{expected}**\n")
    page = (out / "report.html").read_text()
    assert f'<h1>Evaluation report</h1>\n<p id="headline">{html.escape(expected)}</p>' in page


def comparison(a_outcomes, b_outcomes, *, split="test"):
    runs = {"base": run("base", a_outcomes), "sft": run("sft", b_outcomes)}
    return {
        "stages": [summarize_stage(ts, name=name, split=split) for name, ts in runs.items()],
        "comparisons": compare_stages(runs, split=split),
    }


def test_headline_words_win_loss_tie_and_no_comparison():
    win = comparison([False] * 12, [True] * 10 + [False] * 2)  # 10 discordant, all sft's: p = 2 / 2**10
    assert (
        headline(win) == "sft beats base by +83.3 points (0.0% → 83.3%) on 12 paired test tasks (McNemar p = 0.00195)."
    )
    loss = comparison([True] * 10 + [False] * 2, [False] * 12)
    assert headline(loss).startswith("sft is worse than base by -83.3 points (83.3% → 0.0%) on 12 paired test tasks")
    behind = comparison([True, True, False], [True, False, False], split="")
    assert headline(behind) == (
        "sft is behind base by -33.3 points (66.7% → 33.3%) on 3 paired tasks, but the "
        "difference is not significant (McNemar p = 1; 0 tasks only sft solved, 1 only base): "
        "it may be chance."
    )
    tie = comparison([True, False, True, False], [False, True, True, False])
    assert headline(tie) == (
        "sft and base tie at 50.0% success on 4 paired test tasks "
        "(McNemar p = 1; 1 tasks only sft solved, 1 only base)."
    )
    alone = {"stages": tie["stages"][:1], "comparisons": []}
    assert headline(alone) == "base solves 2 of 4 test tasks (50.0%, 95% CI 15.0%–85.0%); no comparison was run."


def test_headline_names_the_bonferroni_correction():
    runs = {
        name: run(name, [False] * 12 if name == "base" else [True] * 10 + [False] * 2) for name in ("base", "sft", "rl")
    }
    report = {
        "stages": [summarize_stage(ts, name=name) for name, ts in runs.items()],
        "comparisons": compare_stages(runs),
    }
    assert "(McNemar p = 0.00195, 0.00586 after Bonferroni over 3 comparisons)" in headline(report)


def test_ttest_without_variance_is_not_shown_as_p_zero(tmp_path):
    """Every paired reward difference is +1: t is undefined; before, the table read ``0 (0)``."""
    report = comparison([False] * 5, [True] * 5)
    assert report["comparisons"][0]["reward_diffs_equal"] and report["comparisons"][0]["reward_p_ttest"] == 0.0
    write_report(report, tmp_path)
    row = next(line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("| base → sft"))
    assert row.split(" | ")[5] == "n/a (every Δ = +1.000)"
    varied = comparison([True, False, False], [True, True, False])
    assert not varied["comparisons"][0]["reward_diffs_equal"]
    write_report(varied, tmp_path / "varied")
    row = next(
        line for line in (tmp_path / "varied" / "report.md").read_text().splitlines() if line.startswith("| base →")
    )
    assert row.split(" | ")[5] == "0.423 (0.423)"  # t = 1 with 2 degrees of freedom


def test_steps_show_arguments_with_line_breaks_and_name_their_reward(written, tmp_path):
    out, _, _ = written
    page = (out / "report.html").read_text()
    assert '<pre class="params">message: done.\nAnything else?</pre>' in page and "\\n" not in page
    assert '<pre class="params">id: #0&amp;</pre>' in page
    assert '<span class="reward">env reward 1.000</span>' in page and ">reward 1.000<" not in page
    scored = run("sft", [True])[0].model_copy(deep=True)
    scored.steps[1].reward, scored.steps[1].metadata = 0.8, {"env_reward": 0.0}
    write_report(comparison([True], [True]), tmp_path, trajectories_by_stage={"sft": [scored]})
    assert (
        '<span class="reward">process reward 0.800, env reward 0.000</span>' in (tmp_path / "report.html").read_text()
    )


def test_glossary_explains_what_the_report_shows(written, tmp_path):
    out, _, _ = written
    md = (out / "report.md").read_text()
    glossary = md[md.index("## Glossary") :]
    for term in (
        "success rate",
        "95% CI",
        "mean reward",
        "tool selection",
        "McNemar p",
        "t-test p",
        "Wilcoxon p",
        "Bonferroni",
        "significant",
    ):
        assert f"- **{term}**: " in glossary, term
    assert "Wilson score interval" in glossary and "pass@k" not in glossary  # no sampled table in this report
    page = (out / "report.html").read_text()
    assert '<h2 id="glossary">Glossary</h2><dl>' in page and "<dt>env reward, process reward</dt>" in page
    stage = {"name": "a", "n": 1, "success_rate": 1.0, "ci95": [0.2, 1.0]}
    sampled = {"title": "Sampled evaluation", "header": ["stage", "pass@1", "pass@2"], "rows": [["a", "1", "1"]]}
    write_report({"stages": [stage], "tables": [sampled]}, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "- **pass@1, pass@k**: " in md and "McNemar" not in md  # no comparison, no comparison terms


def test_writes_are_atomic_and_repeatable(written, tmp_path):
    out, _, report = written
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left behind
    again = write_report(report, tmp_path / "again")
    assert (tmp_path / "again" / "success.png").read_bytes() == (out / "success.png").read_bytes()
    assert set(again) == {"plot-success", "json", "markdown", "html"}  # no curves, no curve plots


def test_invalid_reports(tmp_path):
    stage = {"name": "a", "n": 1, "success_rate": 1.0, "ci95": [0.2, 1.0]}
    with pytest.raises(ValueError, match="non-empty 'stages'"):
        write_report({"stages": []}, tmp_path)
    with pytest.raises(ValueError, match="lacks ci95"):
        write_report({"stages": [{"name": "a", "n": 1, "success_rate": 1.0}]}, tmp_path)
    with pytest.raises(ValueError, match="finite"):
        write_report({"stages": [stage]}, tmp_path, curves={"sft/loss": [(1, float("nan"))]})
    assert not list(tmp_path.iterdir())  # validation happens before anything is written


def test_extra_tables_are_rendered_and_escaped(tmp_path):
    stage = {"name": "a", "n": 1, "success_rate": 1.0, "ci95": [0.2, 1.0]}
    extra = {
        "title": "Per template",
        "header": ["template", "a"],
        "rows": [["<b>cancel|two</b>", "3/5"], ["x", None]],
        "note": "seen & unseen",
    }
    write_report({"stages": [stage], "tables": [extra]}, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Per template" in md and "| <b>cancel\\|two</b> | 3/5 |" in md and "| x | – |" in md
    page = (tmp_path / "report.html").read_text()
    assert '<h2>Per template</h2><table id="table-0">' in page.replace("\n", "")
    assert "&lt;b&gt;cancel|two&lt;/b&gt;" in page and "<p>seen &amp; unseen</p>" in page
    with pytest.raises(ValueError, match="as wide as"):
        write_report({"stages": [stage], "tables": [{**extra, "rows": [["only one cell"]]}]}, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_missing_matplotlib_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    stage = {"name": "a", "n": 1, "success_rate": 1.0, "ci95": [0.2, 1.0]}
    with pytest.raises(ImportError, match=r"knowlyr-hub\[report\]"):
        write_report({"stages": [stage], "seconds": 1.0}, tmp_path)


def _chromium(*args, profile):
    return subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=120,
    )


@pytest.mark.integration
def test_chromium_renders_the_report(written, tmp_path):
    require(shutil.which("chromium") is not None, "chromium is not installed (apt-get install chromium)")
    out, _, report = written
    url = (out / "report.html").as_uri()
    dom = _chromium("--dump-dom", url, profile=tmp_path / "profile-dom").stdout.decode()
    for plot_id in ("plot-success", "plot-curve-loss", "plot-curve-reward"):
        assert re.search(rf'<img id="{plot_id}" alt="[^"]+" src="data:image/png;base64,', dom), plot_id
    assert dom.count("<li>") >= 4 and "&lt;script&gt;" in dom  # the step lists, escaped text still text
    assert f'<p id="headline">{html.escape(headline(report))}</p>' in dom

    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1200,2400", url, profile=tmp_path / "profile-shot")
    from matplotlib.image import imread

    pixels = (imread(shot)[..., :3] * 255).round()  # (H, W, 3)
    bar = ((abs(pixels - BAR_RGB) <= 2).all(axis=-1)).sum()
    assert bar > 2000, "the success bars of the embedded PNG are not on screen"
    # the headline's box is drawn under the title, before anything else
    box = (abs(pixels - HEADLINE_RGB) <= 2).all(axis=-1)  # (H, W)
    rows = box.sum(axis=1).nonzero()[0]
    assert box.sum() > 20_000 and rows.min() < 200, "the headline is not at the top of the page"
