"""``knowlyr-recorder view`` pages rendered by real headless Chromium (Debian's package)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from html.parser import HTMLParser

import pytest

from agentrecorder.cli import main
from knowlyrcore.testing import require

pytestmark = pytest.mark.integration

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(found is not None, "chromium is not installed (apt-get install chromium)")
    return found


class StepCollector(HTMLParser):
    """Collects step sections, their headings and whether observations start collapsed."""

    def __init__(self):
        super().__init__()
        self.steps: list[dict] = []
        self.stack: list[str] = []
        self.in_heading = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section" and "step" in (attrs.get("class") or ""):
            self.steps.append({"tool": attrs.get("data-tool"), "heading": "", "details_open": []})
        elif tag == "h2" and self.steps:
            self.in_heading = True
        elif tag == "details" and self.steps and "observation" in (attrs.get("class") or ""):
            self.steps[-1]["details_open"].append("open" in attrs)

    def handle_endtag(self, tag):
        if tag == "h2":
            self.in_heading = False

    def handle_data(self, data):
        if self.in_heading:
            self.steps[-1]["heading"] += data


def render(browser: str, page, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("log", "index", "tools"),
    [
        ("swe-agent_test-repo-i1.traj", 0, ["find_file", "open", "edit", "bash", "submit"]),
        ("openhands_basic.json", 0, ["str_replace_editor", "finish"]),
    ],
)
def test_rendered_page_shows_every_step(real, tmp_path, log, index, tools):
    browser = chromium()
    page = tmp_path / "page.html"
    assert main(["view", str(real(log)), "--index", str(index), "-o", str(page)]) == 0

    dom = render(browser, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = StepCollector()
    parsed.feed(dom.stdout)
    assert [s["tool"] for s in parsed.steps] == tools
    assert [s["heading"].startswith(f"Step {i} {t}") for i, (s, t) in enumerate(zip(parsed.steps, tools))] == [
        True
    ] * len(tools)
    assert all(s["details_open"] == [False] for s in parsed.steps)  # observations start collapsed
    assert 'id="outcome"' in dom.stdout

    shot = tmp_path / "shot.png"
    result = render(browser, page, tmp_path, "--window-size=1000,1400", f"--screenshot={shot}")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (1000, 1400)
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few hundred bytes
