"""Task suites: procedurally generated, seeded, verifiable tasks with a scripted expert.

A suite turns ``(split, n, seed)`` into task records (dicts that ``TaskInfo.coerce`` accepts)
for one registered environment, always the same records for the same call. Splits:

* ``train`` and ``test`` draw from the same task templates but share no entity and no seed
  (disjoint name/number pools and disjoint seed streams);
* ``test-unseen`` uses templates that ``train`` never contains.

A suite may also give its templates roles (``TaskSuite.roles``), which say what training may do
with each:

* ``demonstrated``: in ``train`` and ``test``; the expert's trajectories of them are SFT/DPO data;
* ``verifier_only``: in ``train-verifier-only`` and ``test-verifier-only`` only. Their tasks have
  checks and partial credit, so RL, rejection fine-tuning and evaluation can use them, but no
  expert trajectory of them may reach a dataset: they measure what a verifier teaches that no
  demonstration showed;
* ``held_out``: in ``test-unseen`` only, never trained on in any way.

The ``-verifier-only`` splits exist only for a suite with ``verifier_only`` templates.

Every task carries its ground-truth solution in ``metadata.solution`` (the expert's tool
calls, as in tau-bench's task actions); environments never show metadata to the policy. The
suite's ``expert()`` returns a policy that replays it and solves every task.

Suites are found through the ``knowlyr.task_suites`` entry-point group, so other packages can
add their own; ``get_suite(name)`` loads one, ``list_suites()`` names them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from knowlyrcore.errors import KnowlyrError
from knowlyrcore.policy import SolutionReplay

SPLITS = ("train", "test", "test-unseen")
#: The splits of a suite's verifier-only templates (train side, test side).
VERIFIER_ONLY_SPLITS = ("train-verifier-only", "test-verifier-only")
TEMPLATE_ROLES = ("demonstrated", "verifier_only", "held_out")
#: The role whose templates each split draws from, for a suite with roles.
SPLIT_ROLES = {
    "train": "demonstrated",
    "test": "demonstrated",
    "train-verifier-only": "verifier_only",
    "test-verifier-only": "verifier_only",
    "test-unseen": "held_out",
}
ENTRY_POINT_GROUP = "knowlyr.task_suites"


class SuiteError(KnowlyrError, ValueError):
    """An unknown suite or split, or a request the suite cannot satisfy."""


@dataclass(frozen=True)
class TaskSuite:
    """A named task generator for one environment.

    ``generate(split, n, seed)`` returns ``n`` task dicts; ``env_id`` and ``env_kwargs`` build
    the environment the tasks run in; ``max_steps`` is a step budget that lets the expert
    finish with room to spare; ``system_prompt`` is what a model policy should be told.
    """

    name: str
    env_id: str
    description: str
    generator: Callable[[str, int, int], list[dict[str, Any]]]
    max_steps: int = 10
    #: A system prompt that tells a model the environment's tools (empty: none needed).
    system_prompt: str = ""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Template names by role (``TEMPLATE_ROLES``); empty for a suite that gives none.
    roles: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.roles) - set(TEMPLATE_ROLES)
        if unknown:
            raise SuiteError(f"suite {self.name!r}: unknown template roles {sorted(unknown)} (known: {TEMPLATE_ROLES})")

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits ``generate`` accepts."""
        return SPLITS + (VERIFIER_ONLY_SPLITS if self.roles.get("verifier_only") else ())

    @property
    def template_roles(self) -> dict[str, str]:
        """``{template: its role}`` (empty for a suite without roles)."""
        return {template: role for role, templates in self.roles.items() for template in templates}

    def role_of(self, template: str) -> str | None:
        """The role of ``template`` (None: the suite gives it none)."""
        return self.template_roles.get(template)

    def generate(self, split: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
        if split not in self.splits:
            raise SuiteError(f"unknown split {split!r} of suite {self.name!r}; choose one of {', '.join(self.splits)}")
        if n < 1:
            raise SuiteError(f"n must be >= 1, got {n}")
        return self.generator(split, n, seed)

    def expert(self) -> SolutionReplay:
        """A fresh expert policy (replays each task's ground-truth solution)."""
        return SolutionReplay()


def list_suites() -> list[str]:
    """Names of every installed suite."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def get_suite(name: str) -> TaskSuite:
    """Load the suite registered as ``name``."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            suite = ep.load()
            if not isinstance(suite, TaskSuite):
                raise SuiteError(f"entry point {ep.value} for suite {name!r} is not a TaskSuite")
            return suite
    known = ", ".join(list_suites()) or "none installed"
    raise SuiteError(f"unknown task suite {name!r} (known: {known})")


__all__ = [
    "ENTRY_POINT_GROUP",
    "SPLITS",
    "SPLIT_ROLES",
    "TEMPLATE_ROLES",
    "VERIFIER_ONLY_SPLITS",
    "SolutionReplay",
    "SuiteError",
    "TaskSuite",
    "get_suite",
    "list_suites",
]
