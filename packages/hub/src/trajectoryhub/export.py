"""``DatasetExporter``: trajectories -> SFT / DPO / GRPO training JSONL (docs/formats.md).

Records are the models of ``knowlyrcore.datasets`` (``SFTRecord``, ``DPORecord``,
``GRPORecord``), the ones knowlyr-trainer reads with. Token ids the policy sampled
(``Step.token_ids`` / ``logprobs``) go along on each assistant message and ``steps`` entry, an
online rollout's ``observation_token_ids`` on each tool message and its ``prompt_token_ids`` on
each GRPO attempt, so GRPO trains on the exact tokens sampled.

- SFT: one record per successful trajectory, in the agent ``steps`` format (``{thought,
  action, observation, reward}``, the action a ``{"name", "parameters"}`` call that the trainer
  renders as ``Action: {json}``) or in OpenAI chat ``messages`` + ``tools`` form. SFT imitates
  every step it is given, so by default it gets only trajectories whose outcome says success;
  failed and unjudged ones are left out and counted (``include_failures`` keeps them, e.g. to
  select by ``min_reward`` alone).
- DPO: ``prompt`` / ``chosen`` / ``rejected`` with the two responses as message lists, from a
  preferences file (``knowlyr-reward pairs``) or paired here by the rule ``knowlyr-reward pairs``
  applies (``knowlyrcore.datasets.pair_preferences``): per task, best against worst by default,
  or every pair (``pairing="all_above_margin"``), rewards at least ``min_margin`` apart.
  Failures are what DPO learns to avoid, so they stay in as ``rejected``; a pair whose
  ``chosen`` failed is left out.
- ATIF / ADP: one interchange document per trajectory (with knowlyr-recorder, the ``recorder``
  extra), for the other tools of the ecosystem: a conversion, so every trajectory by default.
- GRPO: per task, every attempt, failed ones included (the group's spread of rewards is the
  learning signal), as messages with its reward and step rewards; groups smaller than
  ``min_group_size`` or whose rewards are all equal (zero advantage: no learning signal) are
  left out and counted.
A trajectory's reward is its scored total (``reward``), else the outcome score, else 1/0 for
success/failure; trajectories with none of these cannot be ranked and are counted as
``unscored``. Every file is written atomically.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowlyrcore import Trajectory, read_jsonl, read_trajectories, write_jsonl
from knowlyrcore.datasets import (
    DEFAULT_MIN_MARGIN,
    DEFAULT_PAIRING,
    DPORecord,
    GRPORecord,
    GRPOTrajectory,
    PreferenceRecord,
    SFTRecord,
    pair_preferences,
)
from knowlyrcore.errors import DataFormatError, DomainError, require_extra
from knowlyrcore.errors import MissingExtraError as MissingExtraError  # the one type; still importable here


def trajectory_reward(t: Trajectory) -> float | None:
    if t.reward is not None:
        return t.reward
    if t.outcome.score is not None:
        return t.outcome.score
    if t.outcome.success is not None:
        return 1.0 if t.outcome.success else 0.0
    return None


def _observation(step) -> str:
    obs = step.observation
    return f"{obs.output}\n[error] {obs.error}" if obs.error else obs.output


def _sampled(step) -> dict[str, Any]:
    """The step's ``token_ids`` / ``logprobs`` when the policy's were recorded (they survive export;
    ids that cannot be token ids, such as negative ones, are not carried)."""
    ids = _token_list(step.token_ids)
    if ids is None:
        return {}
    return {"token_ids": ids} if step.logprobs is None else {"token_ids": ids, "logprobs": step.logprobs}


def _token_list(value: Any) -> list[int] | None:
    """``value`` when it is a list of token ids (what an online rollout writes in metadata), else None."""
    if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        return value
    return None


def steps_of(t: Trajectory) -> list[dict[str, Any]]:
    """The agent ``steps`` form of a trajectory."""
    return [
        {
            "thought": s.thought,
            "action": {"name": s.tool_call.name, "parameters": s.tool_call.parameters},
            "observation": _observation(s),
            "reward": s.reward,
            **_sampled(s),
        }
        for s in t.steps
    ]


def messages_of(t: Trajectory, *, include_task: bool = True) -> list[dict[str, Any]]:
    """OpenAI chat messages: the task as the user turn, tool calls, tool results.

    Recorded tokens come along: an assistant message gets its step's ``token_ids`` / ``logprobs``,
    a tool message the tokens that followed the answer (``metadata.observation_token_ids``)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": t.task.description}] if include_task else []
    for s in t.steps:
        call_id = s.tool_call.id or f"call_{s.index}"
        messages.append(
            {
                "role": "assistant",
                "content": s.thought,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": s.tool_call.name,
                            "arguments": json.dumps(s.tool_call.parameters, ensure_ascii=False),
                        },
                    }
                ],
                **_sampled(s),
            }
        )
        tool = {"role": "tool", "tool_call_id": call_id, "content": _observation(s)}
        following = _token_list(s.metadata.get("observation_token_ids"))
        messages.append(tool if following is None else {**tool, "token_ids": following})
    return messages


def tools_of(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """OpenAI tool specs: every tool a trajectory's episode was offered when that depends on the
    task (``_offered_tools``), then every other tool used: from the domain profile when it declares
    the tool."""
    from knowlyrcore import get_domain_profile

    specs: dict[str, dict[str, Any]] = {}
    for t in trajectories:
        for schema in _offered_tools(t):
            specs.setdefault(schema["function"]["name"], schema)
        try:
            profile = get_domain_profile(t.task.domain)
        except DomainError:
            profile = None
        for s in t.steps:
            name = s.tool_call.name
            if name in specs:
                continue
            if profile is not None and name in profile.tool_names:
                specs[name] = profile.get_tool(name).to_openai_tool()
            else:
                props = {k: {} for k in s.tool_call.parameters}
                specs[name] = {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": "",
                        "parameters": {"type": "object", "properties": props},
                    },
                }
    return list(specs.values())


def _offered_tools(t: Trajectory) -> list[dict[str, Any]]:
    """The tools of an episode whose environment offered the task's own: as the rollout recorded
    them (``metadata["tools"]``, see ``knowlyrcore.rollout.ToolWatch``), else, for a BFCL task
    recorded elsewhere, its functions as knowlyr-sandbox's ``knowlyr/bfcl`` offers them."""
    recorded = t.metadata.get("tools")
    if isinstance(recorded, list):
        return [
            s
            for s in recorded
            if isinstance(s, dict)
            and isinstance(s.get("function"), dict)
            and isinstance(s["function"].get("name"), str)
        ]
    functions = t.task.metadata.get("functions")
    if t.task.domain != "bfcl" or not isinstance(functions, list):
        return []
    try:  # lazily: the hub works without knowlyr-sandbox, and only BFCL tasks need it
        from agentsandbox.bfcl import tool_specs
        from agentsandbox.bfcl.env import RESPOND

        return [spec.to_openai_tool() for spec in [*tool_specs(functions), RESPOND]]
    except (ImportError, KeyError, TypeError, ValueError, AttributeError):  # no sandbox, or malformed functions
        return []


def _metadata(t: Trajectory) -> dict[str, Any]:
    return {
        "trajectory_id": t.id,
        "agent": t.agent,
        "model": t.model,
        "domain": t.task.domain,
        "success": t.outcome.success,
        "source": t.source,
    }


#: what each ``ExportReport.skipped`` reason means, for people
SKIP_REASONS = {
    "not_successful": "not successful (failed or not judged; --include-failures keeps them)",
    "below_min_reward": "below --min-reward",
    "no_steps": "without steps",
    "partly_scored": "with only some steps scored (steps records weigh steps by reward: all or none)",
    "unscored": "without reward, score or outcome",
    "no_task_id": "without task id",
    "single_attempt": "tasks with a single attempt",
    "margin_too_small": "tasks without two rewards at least --min-margin apart",
    "chosen_failed": "tasks where only a failed attempt could be chosen",
    "group_too_small": "tasks with fewer than --min-group-size attempts",
    "equal_rewards": "tasks whose attempts all have the same reward",
}


@dataclass
class ExportReport:
    """What an export wrote and what it left out, and why."""

    written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def left_out(self) -> str:
        """``left out M: k reason, ...``, each reason in words (``left out none``)."""
        if not self.skipped:
            return "left out none"
        reasons = ", ".join(f"{n} {SKIP_REASONS.get(why, why)}" for why, n in self.skipped.items())
        return f"left out {sum(self.skipped.values())}: {reasons}"


class DatasetExporter:
    """Exports trajectories (a JSONL path, several paths, or ``Trajectory`` objects)."""

    def __init__(self, trajectories_dir: str | os.PathLike | Iterable[Any] | None = None, *, trajectories=None):
        source = trajectories if trajectories is not None else trajectories_dir
        if source is None:
            raise ValueError("DatasetExporter needs trajectories_dir (a JSONL file or folder) or trajectories")
        self.trajectories = self._load(source)

    @staticmethod
    def _load(source) -> list[Trajectory]:
        if isinstance(source, (str, os.PathLike)):
            path = Path(source)
            files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
            return [t for f in files for t in read_trajectories(f)]
        items = list(source)
        if all(isinstance(i, (str, os.PathLike)) for i in items):
            return [t for i in items for t in DatasetExporter._load(i)]
        return [i if isinstance(i, Trajectory) else Trajectory.model_validate(i) for i in items]

    def _with_steps(self, report: ExportReport) -> Iterator[Trajectory]:
        """The trajectories with at least one step: DPO and GRPO train on a completion's assistant
        turns, and a trajectory without steps has none (the trainer would refuse the record)."""
        for t in self.trajectories:
            if t.steps:
                yield t
            else:
                report.skip("no_steps")

    def _by_task(self, report: ExportReport) -> dict[str, list[tuple[float, Trajectory]]]:
        groups: dict[str, list[tuple[float, Trajectory]]] = defaultdict(list)
        for t in self._with_steps(report):
            reward = trajectory_reward(t)
            if reward is None:
                report.skip("unscored")
            elif not t.task.id:
                report.skip("no_task_id")
            else:
                groups[t.task.id].append((reward, t))
        return groups

    def _kept(self, report: ExportReport, *, min_reward: float | None, success_only: bool) -> Iterator[Trajectory]:
        """The trajectories an SFT-style export keeps; the others are counted in ``report``."""
        for t in self.trajectories:
            reward = trajectory_reward(t)
            if not t.steps:
                report.skip("no_steps")
            elif success_only and t.outcome.success is not True:
                report.skip("not_successful")
            elif min_reward is not None and (reward is None or reward < min_reward):
                report.skip("below_min_reward")
            else:
                yield t

    def export_sft(
        self,
        output: str | os.PathLike,
        *,
        format: str = "steps",
        min_reward: float | None = None,
        include_failures: bool = False,
        system_prompt: str | None = None,
        include_tools: bool = True,
    ) -> ExportReport:
        """One SFT record per kept trajectory, in ``steps`` or ``messages`` format.

        Kept: trajectories with steps whose outcome says success (``include_failures`` drops
        that condition: failed and unjudged ones too) and, with ``min_reward``, at least that
        reward.
        ``messages`` records open with ``system_prompt`` when given and carry the tools' schemas
        unless ``include_tools`` is false; train with the same system prompt (and tools) the
        policy will be given when it acts, so it sees at inference what it saw in training.
        """
        if format not in ("steps", "messages"):
            raise ValueError(f"format must be 'steps' or 'messages', got {format!r}")
        report = ExportReport()
        records = []
        for t in self._kept(report, min_reward=min_reward, success_only=not include_failures):
            if format == "steps" and len({s.reward is None for s in t.steps}) > 1:
                report.skip("partly_scored")  # the trainer could not weigh the unscored steps
                continue
            if format == "steps":
                context = {k: v for k, v in {"repo": t.task.repo, "domain": t.task.domain}.items() if v}
                shape: dict[str, Any] = {
                    "instruction": t.task.description,
                    "input": json.dumps(context) if context else "",
                    "steps": steps_of(t),
                }
            else:
                system = [{"role": "system", "content": system_prompt}] if system_prompt else []
                shape = {"messages": system + messages_of(t)}
                if include_tools:
                    shape["tools"] = tools_of([t])
            records.append(SFTRecord(task_id=t.task.id, reward=trajectory_reward(t), **shape, metadata=_metadata(t)))
        report.written = write_jsonl(output, records)
        return report

    def export_interchange(
        self, output: str | os.PathLike, *, to: str, min_reward: float | None = None, success_only: bool = False
    ) -> ExportReport:
        """One ATIF or ADP document per kept trajectory, one per line, for tools that read those
        standards (knowlyr-recorder's writers: what a standard has no field for rides along under
        a ``knowlyr`` key, so reading the file back with knowlyr-recorder loses nothing)."""
        WRITERS = require_extra("agentrecorder.interop", "knowlyr-hub", "recorder", f"exporting {to}").WRITERS
        if to not in WRITERS:
            raise ValueError(f"to must be one of {', '.join(WRITERS)}, got {to!r}")
        report = ExportReport()
        kept = self._kept(report, min_reward=min_reward, success_only=success_only)
        report.written = write_jsonl(output, (WRITERS[to](t) for t in kept))  # streamed, one document at a time
        return report

    def export_dpo(
        self,
        output: str | os.PathLike,
        *,
        preferences: str | os.PathLike | None = None,
        min_margin: float = DEFAULT_MIN_MARGIN,
        pairing: str = DEFAULT_PAIRING,
        max_pairs_per_task: int | None = None,
    ) -> ExportReport:
        """DPO pairs from ``preferences`` (``knowlyr-reward pairs`` output) or paired here by
        ``knowlyrcore.datasets.pair_preferences``, the rule ``knowlyr-reward pairs`` applies:
        ``pairing="best_vs_worst"`` (default) or ``"all_above_margin"``, rewards at least
        ``min_margin`` apart, never a failed attempt as the chosen one."""
        report = ExportReport()
        if preferences is not None:
            # Streamed into the (atomic) writer: 50,000 pairs are 100,000 trajectories, too many to
            # hold at once. An empty file raises at its end, before the output is replaced.
            pairs = _read_preferences(preferences, require_one=True)
        else:
            pairs = pair_preferences(
                self._with_steps(report),
                task_id=lambda t: t.task.id,
                reward=trajectory_reward,
                failed=lambda t: t.outcome.success is False,
                pairing=pairing,
                min_margin=min_margin,
                max_pairs_per_task=max_pairs_per_task,
                on_skip=report.skip,
            )
        records = (
            DPORecord(
                task_id=c.task.id,
                prompt=c.task.description,
                chosen=messages_of(c, include_task=False),
                rejected=messages_of(r, include_task=False),
                margin=round(m, 6),
                metadata={"chosen_id": c.id, "rejected_id": r.id},
            )
            for _, c, r, m in pairs
        )
        report.written = write_jsonl(output, records)
        return report

    def export_grpo(self, output: str | os.PathLike, *, min_group_size: int = 2) -> ExportReport:
        """One record per task holding every scored attempt, failed ones included (group-relative
        advantages need >= 2 attempts and rewards that differ)."""
        report = ExportReport()
        records = []
        for task_id, group in self._by_task(report).items():
            if len(group) < min_group_size:
                report.skip("group_too_small")
                continue
            if len({r for r, _ in group}) == 1:
                report.skip("equal_rewards")
                continue
            first = group[0][1]
            records.append(
                GRPORecord(
                    task_id=task_id,
                    prompt=first.task.description,
                    trajectories=[_grpo_trajectory(r, t) for r, t in group],
                )
            )
        report.written = write_jsonl(output, records)
        return report


def _grpo_trajectory(reward: float, t: Trajectory) -> GRPOTrajectory:
    """One attempt of a group; with the prompt's recorded ids (an online rollout's
    ``metadata.prompt_token_ids``) when there are any."""
    attempt: dict[str, Any] = {
        "messages": messages_of(t, include_task=False),
        "reward": reward,
        "step_rewards": [s.reward if s.reward is not None else reward for s in t.steps],
    }
    prompt_ids = _token_list(t.metadata.get("prompt_token_ids"))
    if prompt_ids is not None:
        attempt["prompt_token_ids"] = prompt_ids
    return GRPOTrajectory(**attempt)


def _read_preferences(
    path: str | os.PathLike, *, require_one: bool = False
) -> Iterator[tuple[str, Trajectory, Trajectory, float]]:
    """``(task id, chosen, rejected, margin)`` of each ``knowlyr-reward pairs`` record; a bad one is
    a ``DataFormatError`` naming the file, the line and the field (``chosen.steps``, ``margin``),
    and so is a file with no pair at all when ``require_one``."""
    count = 0
    for record in read_jsonl(path, PreferenceRecord):
        count += 1
        yield record.chosen.task.id, record.chosen, record.rejected, record.margin
    if require_one and not count:
        raise DataFormatError(str(path), None, "no preference pairs (empty file)")
