"""``policy_from_spec``: the policy a command line names, as ``knowlyr-hub evaluate --policy SPEC``.

A spec is a model alias (``smollm2-135m``), a checkpoint directory or Hub id, or an ``http(s)``
base URL. A model is loaded and acts through the local policy (``TokenPolicy`` over a
``LocalGenerator``: the acting engine, every episode's chat kept as token ids), so what an
evaluation measures is what online RL trains. A checkpoint directory is prompted by its prompt
contract (``agenttrainer.models.prompt_contract``: the system prompt and tool schemas it was
trained with) unless the caller says otherwise. A URL is a model someone else serves; its policy
is knowlyr-core's ``EndpointPolicy`` (OpenAI-compatible or Anthropic), one per episode, so the
factory returns a factory of them.

This is the trainer's one door for knowlyr-hub: hub imports nothing else of the trainer
(``packages/hub/tests/test_layering.py``). Hub builds an endpoint policy itself, so that
evaluating a served model needs no trainer (and no torch).

Example:
    >>> policy = policy_from_spec("smollm2-135m", max_new_tokens=64)  # doctest: +SKIP
    >>> evaluate_policy(policy, tasks, env="knowlyr/retail")  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agenttrainer.acting.policy import TokenPolicy
from agenttrainer.console import quiet_library_warnings
from agenttrainer.models import read_contract, resolve_model_path
from knowlyrcore.endpoint import EndpointPolicy

DTYPES = ("float32", "bfloat16")


def policy_from_spec(
    spec: str,
    *,
    system_prompt: str | None = None,
    tools: list[Any] | None = None,
    include_tools: bool | None = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    dtype: str = "float32",
    served_model: str | None = None,
    api_key: str | None = None,
    announce: Callable[[str], None] | None = None,
) -> Any:
    """The policy ``spec`` names: a ``TokenPolicy`` for a model (a ``BatchPolicy``), or for an
    ``http(s)`` URL a factory of per-episode ``EndpointPolicy`` objects serving ``served_model``.
    Either is what knowlyr-hub's runners take (``knowlyrcore.policy.as_batch_policy``).

    ``system_prompt`` and ``include_tools`` (None: not given) override a checkpoint's prompt
    contract; without either, the system turn is each task's ``metadata.system_prompt`` and the
    tool schemas are shown. ``tools`` are the environment's tools as built (OpenAI schemas),
    offered when tools are shown. ``temperature`` 0 is greedy; ``dtype`` (``float32`` or
    ``bfloat16``) is the loaded weights' (bfloat16: about 2x faster on CPUs with AMX or
    AVX512-BF16, many times slower without native bf16). ``announce(line)`` is told when a
    prompt contract is followed.

    Loading a model hides transformers' known noisy FutureWarnings and shows the trainer's own
    info lines on stderr (which model a name resolved to, a conversion), as the trainer's
    commands do. Raises ``ModelLoadError`` when ``spec`` names no model that loads.
    """
    if spec.startswith(("http://", "https://")):
        if not served_model:
            raise ValueError("an endpoint policy needs served_model, the name the server serves the model under")
        return functools.partial(
            EndpointPolicy,
            spec,
            served_model,
            api_key=api_key,
            system_prompt=system_prompt,
            tools=None if include_tools is False else tools,
            include_tools=include_tools is not False,
            max_tokens=max_new_tokens,
            temperature=temperature,
        )
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    quiet_library_warnings()
    path = resolve_model_path(spec)
    contract = read_contract(path) if Path(path).is_dir() else None
    if contract is not None:  # prompt the checkpoint as it was trained, unless told otherwise
        if system_prompt is None:
            system_prompt = contract.system_prompt or ""  # "": no system turn, as trained
        if include_tools is None:
            include_tools = contract.include_tools
        if announce is not None:
            announce(f"prompting {spec} by its prompt contract ({contract.describe()})")
    include_tools = include_tools is not False
    return TokenPolicy.from_pretrained(
        spec,
        torch_dtype=getattr(torch, dtype),
        system_prompt=system_prompt,
        tools=tools if include_tools else None,
        include_tools=include_tools,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
    )
