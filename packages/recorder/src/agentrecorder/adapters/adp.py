"""ADP (Agent Data Protocol) standardized trajectories: ``{id, content: [...], details}``.

``content`` alternates actions and observations, each tagged by ``class_``:

- ``text_observation`` ``{content, name, source: user|agent|environment}``: those before the
  first action are the task (joined by blank lines); a later one is the observation of the
  step before it (consecutive ones joined by newlines). Where ``source`` is not the one
  ``to_adp`` would write (``user`` after a reply, ``environment`` after a tool call) it is
  kept as ``metadata.observation_source``, a ``name`` as ``metadata.observation_name``.
- ``web_observation`` ``{html, axtree, url, ...}``: the accessibility tree (else the HTML) is
  the observation, the URL ``metadata.url``.
- ``api_action`` ``{function, kwargs, description}``: the step ``function(kwargs)``, thought
  ``description``.
- ``code_action`` ``{language, content, description}``: a shell language is ``bash
  {"command"}`` (knowlyr's shell tool), any other ``execute_code {"code_blocks": [{language,
  code}]}`` (as for Who&When logs).
- ``message_action`` ``{content, description}``: ``respond {"message"}``.

``details`` is free, data-set specific: the outcome fields of SWE data sets (``resolved``,
``exit_status``, ``generated_patch``, ``eval_logs``, ``test_result``; often stringified) are
read by ``agentrecorder.outcomes``, ``model_name`` is the model, ``tools`` (a list or its JSON
string) ``metadata.tools``, the rest ``metadata.details``; the ``knowlyr`` block written by
``agentrecorder.interop.to_adp`` is put back. The class names of the schema document's example
(``TextObservation``, ``MessageAction``) and its field names (``text``, ``message``,
``thoughts``) are read too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agentrecorder.adapters.base import RESPOND, ObjectAdapter, StepList
from agentrecorder.errors import FieldError
from agentrecorder.extension import KEY, restore_step, restore_trajectory
from agentrecorder.fields import expect, get, path
from agentrecorder.outcomes import OUTCOME_KEYS, decoded, swe_outcome
from knowlyrcore.models import TaskInfo
from knowlyrcore.trajectory import Trajectory

SHELLS = ("bash", "sh", "shell", "zsh")
ACTIONS = ("api_action", "code_action", "message_action")
OBSERVATIONS = ("text_observation", "web_observation")
#: the observation source ``to_adp`` writes after a step with this tool (anything else: environment)
DEFAULT_SOURCE = {RESPOND: "user"}


def class_name(item: Any) -> str | None:
    """``class_`` in snake case (``TextObservation`` → ``text_observation``), or None."""
    name = item.get("class_") if isinstance(item, dict) else None
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if isinstance(name, str) else None


def _text(item: dict, where: str, *keys: str) -> str:
    """The first of ``keys`` present (a string; null counts as empty)."""
    for key in keys:
        if item.get(key) is not None:
            return get(item, key, where, str)
    return ""


class ADPAdapter(ObjectAdapter):
    name = "adp"
    description = (
        "ADP (Agent Data Protocol) standardized rows {id, content[text_observation, api_action, ...], details}"
    )
    priority = 5
    not_an_object = "not a JSON object (a data set's rows are read one by one)"

    def check_object(self, record: dict[str, Any]) -> str | None:
        content = record.get("content")
        if not isinstance(content, list) or not content:
            return "no 'content' list"
        if not all(class_name(item) in (*ACTIONS, *OBSERVATIONS) for item in content[:1]):
            return "content[0] is no ADP action or observation (class_)"
        return None

    def convert(self, record: Any, *, source: str) -> Iterator[Trajectory]:
        record = expect(record, dict, "$")
        steps = StepList()
        task: list[str] = []
        for i, item in enumerate(get(record, "content", "$", list)):
            where = path("$.content", i)
            kind = class_name(expect(item, dict, where))
            if kind in OBSERVATIONS:
                self._observation(item, kind, where, steps, task)
            elif kind in ACTIONS:
                self._action(item, kind, where, steps)
            else:
                known = ", ".join((*ACTIONS, *OBSERVATIONS))
                raise FieldError(
                    path(where, "class_"), f"unknown ADP class {item.get('class_')!r:.40} (known: {known})"
                )
        details = dict(get(record, "details", "$", dict, {}))
        block = details.pop(KEY, None)
        if isinstance(block, dict) and isinstance(block.get("steps"), dict):
            self._restore_steps(steps, block.pop("steps"), path(path("$.details", KEY), "steps"))
        outcome, rest = swe_outcome(details, "$.details")
        metadata: dict[str, Any] = {"format": "adp"}
        if details.get("tools") is not None:
            metadata["tools"] = expect(decoded(details["tools"]), list, "$.details.tools")
        rest.update({k: v for k, v in details.items() if k not in (*OUTCOME_KEYS, "tools", "model_name")})
        if rest:
            metadata["details"] = rest
        traj_id = str(get(record, "id", "$", (str, int), ""))
        coding = any(k in details for k in OUTCOME_KEYS)
        fields = {
            "id": traj_id,
            "task": TaskInfo(id=traj_id, description="\n\n".join(task), domain="coding" if coding else "generic"),
            "model": get(details, "model_name", "$.details", str, ""),
            "steps": steps.steps,
            "outcome": outcome,
            "source": source,
            "metadata": metadata,
        }
        yield Trajectory(**restore_trajectory(fields, block, path("$.details", KEY)))

    def _observation(self, item: dict, kind: str, where: str, steps: StepList, task: list[str]) -> None:
        if kind == "web_observation":
            text = _text(item, where, "axtree", "html")
        else:
            text = _text(item, where, "content", "text")
        if steps.last is None:
            task.append(text)
            return
        step = steps.last
        steps.set_observation(step, text)
        observed_from = get(item, "source", where, str, None)
        if observed_from is not None and observed_from != DEFAULT_SOURCE.get(step.tool_call.name, "environment"):
            step.metadata["observation_source"] = observed_from
        for key, meta_key in (("name", "observation_name"), ("url", "url")):
            if item.get(key) is not None:
                step.metadata[meta_key] = get(item, key, where, str)

    def _action(self, item: dict, kind: str, where: str, steps: StepList) -> None:
        thought = _text(item, where, "description", "thoughts")
        if kind == "api_action":
            steps.add(get(item, "function", where, str), get(item, "kwargs", where, dict, {}), thought=thought)
        elif kind == "message_action":
            steps.add(RESPOND, {"message": _text(item, where, "content", "message")}, thought=thought)
        else:
            language = get(item, "language", where, str, "")
            code = get(item, "content", where, str)
            if language.lower() in SHELLS:
                steps.add("bash", {"command": code}, thought=thought)
            else:
                steps.add("execute_code", {"code_blocks": [{"language": language, "code": code}]}, thought=thought)

    def _restore_steps(self, steps: StepList, blocks: dict, where: str) -> None:
        for key, block in blocks.items():
            index = int(key) if str(key).isdigit() else -1
            if not 0 <= index < len(steps):
                raise FieldError(path(where, key), f"no step {key!r:.20} ({len(steps)} steps)")
            steps.steps[index] = restore_step(steps.steps[index], block, path(where, key))
