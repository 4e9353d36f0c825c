"""The conformance suite every adapter passes: subclass ``AdapterConformance`` with a sample.

    from agentrecorder.testing import AdapterConformance

    class TestMyFormat(AdapterConformance):
        format = "my-format"

        def sample(self):
            return json.loads(Path("tests/data/run.json").read_text())

It checks that the adapter is registered under the entry-point group, accepts and
auto-detects its own sample, rejects junk with a reason instead of raising, converts into
valid trajectories that survive a JSON round trip unchanged and deterministically, and that
corrupting any value of the sample (wrong types, nulls) yields either a normal conversion or a
one-line ``ConversionError`` naming the JSON path — never a ``KeyError`` or ``TypeError``.
Needs pytest (the ``dev`` extra).
"""

from __future__ import annotations

import copy
import json
from importlib.metadata import entry_points
from typing import Any, ClassVar

import pytest

from agentrecorder.convert import convert_record
from agentrecorder.detect import detect
from agentrecorder.errors import ConversionError
from agentrecorder.registry import ENTRY_POINT_GROUP, get_adapter
from knowlyrcore.trajectory import Trajectory

JUNK: list[Any] = [None, 0, 3.5, "text", [], {}, [1, 2], {"x": 1}, [{"role": 5}], {"history": "no"}]
#: values swapped into the sample to corrupt it
WRONG_VALUES: list[Any] = [12345, None, "oops", [], {"unexpected": True}]


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(value, dict):
        for key, child in value.items():
            out.append((*prefix, key))
            out.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out.append((*prefix, i))
            out.extend(_paths(child, (*prefix, i)))
    return out


def _replace(value: Any, where: tuple, new: Any) -> Any:
    copied = copy.deepcopy(value)
    target = copied
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = new
    return copied


class AdapterConformance:
    """Subclass, set ``format`` and implement ``sample()``."""

    #: the registry / ``--format`` name
    format: ClassVar[str] = ""
    #: how many corrupted variants of the sample to try (spread over the whole document)
    max_mutations: ClassVar[int] = 5000

    def sample(self) -> Any:
        raise NotImplementedError("return one parsed record in this format")

    @pytest.fixture
    def adapter(self):
        return get_adapter(self.format)

    def convert(self, adapter, record: Any) -> list[Trajectory]:
        return list(convert_record(adapter, record, path=f"<{self.format} sample>"))

    def test_registered_under_entry_point_group(self):
        declared = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
        assert self.format in declared, f"{self.format!r} is not declared in entry-point group {ENTRY_POINT_GROUP}"

    def test_accepts_its_sample(self, adapter):
        assert adapter.check(self.sample()) is None

    def test_auto_detection_picks_it(self):
        assert detect(self.sample()).adapter.name == self.format

    def test_rejects_junk_with_a_reason(self, adapter):
        for junk in JUNK:
            reason = adapter.check(junk)
            assert reason is None or (isinstance(reason, str) and reason), junk
            if reason is None:  # accepted junk must still convert or fail cleanly
                try:
                    self.convert(adapter, junk)
                except ConversionError:
                    pass

    def test_converts_to_valid_trajectories(self, adapter):
        trajectories = self.convert(adapter, self.sample())
        assert trajectories
        for t in trajectories:
            assert t.source and t.source.startswith(f"{self.format}:")
            assert [s.index for s in t.steps] == list(range(len(t.steps)))
            assert all(s.tool_call.name and isinstance(s.tool_call.parameters, dict) for s in t.steps)
            assert Trajectory.model_validate(t.model_dump()) == t

    def test_json_round_trip_is_lossless(self, adapter):
        for t in self.convert(adapter, self.sample()):
            again = Trajectory.model_validate_json(t.model_dump_json())
            assert again == t
            assert again.model_dump(mode="json") == json.loads(t.model_dump_json())

    def test_conversion_is_deterministic(self, adapter):
        first = [t.model_dump() for t in self.convert(adapter, self.sample())]
        second = [t.model_dump() for t in self.convert(adapter, self.sample())]
        assert first == second

    def test_corrupted_values_fail_cleanly(self, adapter):
        sample = self.sample()
        paths = _paths(sample)
        stride = max(1, len(paths) * len(WRONG_VALUES) // self.max_mutations)
        tried = 0
        for n, (where, wrong) in enumerate((p, w) for p in paths for w in WRONG_VALUES):
            if n % stride:
                continue
            mutated = _replace(sample, where, wrong)
            if adapter.check(mutated) is not None:
                continue
            tried += 1
            try:
                self.convert(adapter, mutated)
            except ConversionError as exc:
                assert "\n" not in str(exc), str(exc)
            except Exception as exc:
                pytest.fail(f"{type(exc).__name__} escaped for {where!r} = {wrong!r}: {exc}")
        assert tried > 0
