"""``policy_from_spec``: the policy a command line names (what ``knowlyr-hub evaluate --policy`` builds)."""

from __future__ import annotations

import pytest

from agenttrainer.acting import TokenPolicy, policy_from_spec
from agenttrainer.models import ModelLoadError, PromptContract, attach_contract, build_tiny_model, save_model
from knowlyrcore.endpoint import EndpointPolicy
from knowlyrcore.policy import BatchPolicy

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def contract_checkpoint(tmp_path_factory):
    model, tokenizer = build_tiny_model(seed=0)
    attach_contract(model, PromptContract(None, include_tools=False))
    return str(save_model(model, tokenizer, tmp_path_factory.mktemp("contract") / "ckpt"))


def test_a_model_acts_through_the_local_policy(tiny_path):
    policy = policy_from_spec(tiny_path, tools=[WEATHER], max_new_tokens=7, temperature=0.5)
    assert isinstance(policy, TokenPolicy) and isinstance(policy, BatchPolicy)
    assert (policy.max_new_tokens, policy.temperature, policy.system_prompt) == (7, 0.5, None)
    assert policy.tools == [WEATHER] and policy.include_tools
    assert policy.generator.engine is not None  # the acting engine: KV caches kept across turns


def test_a_checkpoint_is_prompted_by_its_contract_unless_told_otherwise(contract_checkpoint):
    told = []
    trained = policy_from_spec(contract_checkpoint, tools=[WEATHER], announce=told.append)
    # trained without a system prompt: none ("" is no system turn, None would be each task's own)
    assert (trained.system_prompt, trained.include_tools, trained.tools) == ("", False, None)
    assert told == [
        f"prompting {contract_checkpoint} by its prompt contract (no system prompt, tool schemas not shown)"
    ]
    overridden = policy_from_spec(contract_checkpoint, tools=[WEATHER], system_prompt="Mine.", include_tools=True)
    assert (overridden.system_prompt, overridden.include_tools, overridden.tools) == ("Mine.", True, [WEATHER])


def test_an_endpoint_url_gives_endpoint_policies_one_per_episode():
    factory = policy_from_spec(
        "http://127.0.0.1:9/v1", served_model="m", tools=[WEATHER], system_prompt="Be brief.", max_new_tokens=9
    )
    first, second = factory(), factory()
    assert isinstance(first, EndpointPolicy) and first is not second
    assert (first.base_url, first.model, first.max_tokens, first.temperature) == ("http://127.0.0.1:9/v1", "m", 9, 0.0)
    assert first.tools == [WEATHER] and first.include_tools
    assert policy_from_spec("https://host/v1", served_model="m", tools=[WEATHER], include_tools=False)().tools is None
    with pytest.raises(ValueError, match="served_model"):
        policy_from_spec("http://127.0.0.1:9/v1")


def test_bad_specs_are_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        policy_from_spec(str(tmp_path / "no-such-checkpoint"))
    with pytest.raises(ValueError, match="dtype"):
        policy_from_spec("smollm2-135m", dtype="float16")
