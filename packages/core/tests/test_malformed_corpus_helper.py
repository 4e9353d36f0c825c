"""``knowlyrcore.testing.malformed_corpus``: the files it writes are what its kinds say."""

from __future__ import annotations

import json

import pytest

from knowlyrcore.testing import MALFORMED_KINDS, malformed_corpus

GOOD = {"id": "t", "description": "list the files"}


def test_the_bad_line_is_the_line_asked_for_after_good_ones(tmp_path):
    path = malformed_corpus(tmp_path, GOOD, {}, kinds=["bad_line"], bad_line=7)["bad_line"]
    lines = path.read_text().splitlines()
    assert len(lines) == 7
    assert [json.loads(line) for line in lines[:6]] == [GOOD] * 6
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[6])


def test_by_default_the_bad_line_is_50000(tmp_path):
    path = malformed_corpus(tmp_path, GOOD, {}, kinds=["bad_line"])["bad_line"]
    assert path.read_bytes().count(b"\n") == 50_000


@pytest.mark.parametrize("line", [0, 1])
def test_a_bad_line_with_no_good_line_before_it_is_refused(tmp_path, line):
    with pytest.raises(ValueError, match="bad_line must be 2 or more"):
        malformed_corpus(tmp_path, GOOD, {}, kinds=["bad_line"], bad_line=line)


def test_every_kind_is_written(tmp_path):
    paths = malformed_corpus(tmp_path, GOOD, {"id": 5}, long_line_mb=1, bad_line=3)
    assert set(paths) == set(MALFORMED_KINDS)
    assert all(p.exists() for p in paths.values())
