"""Every adapter passes the standard suite (``agentrecorder.testing.AdapterConformance``).

Samples are the real published logs where one exists; ShareGPT and the two dict variants
(mini-swe-agent v1.1, OpenHands output.jsonl) have no published file in shared/data/real,
so their samples are small records written to the documented shape.
"""

from __future__ import annotations

import json

from agentrecorder.registry import names
from agentrecorder.testing import AdapterConformance
from knowlyrcore.testing import real_data


def real_json(name: str):
    return json.loads(real_data(name).read_text(encoding="utf-8"))


def openhands_output_record():
    return {
        "instance_id": "astropy__astropy-12907",
        "instruction": "Fix the separability matrix for nested compound models.",
        "history": real_json("openhands_basic.json"),
        "metrics": {
            "accumulated_cost": 0.25,
            "accumulated_token_usage": {"prompt_tokens": 100, "completion_tokens": 7},
        },
        "test_result": {"git_patch": "diff --git a/x b/x\n"},
        "metadata": {"agent_class": "CodeActAgent", "llm_config": {"model": "claude-3-5-sonnet-20241022"}},
    }


def mini_swe_agent_v11_dict():
    return {
        "trajectory_format": "mini-swe-agent-1",
        "info": {
            "exit_status": "Submitted",
            "submission": "diff --git a/a.py b/a.py\n",
            "model_stats": {"instance_cost": 0.0123, "api_calls": 2},
            "mini_version": "1.1.0",
            "config": {"model": {"model_name": "gpt-4o-mini"}},
        },
        "messages": real_json("mini-swe-agent_local.traj.json"),
    }


def sharegpt():
    return {
        "id": "weather-1",
        "system": "You can call get_weather.",
        "tools": '[{"name": "get_weather", "parameters": {"city": {"type": "string"}}}]',
        "conversations": [
            {"from": "human", "value": "What's the weather in Paris?"},
            {"from": "gpt", "value": "Let me check."},
            {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
            {"from": "observation", "value": '{"temp_c": 18, "sky": "cloudy"}'},
            {"from": "gpt", "value": "It is 18°C and cloudy in Paris."},
            {"from": "human", "value": "Thanks!"},
        ],
    }


def real(name: str, index: int | None = None):
    """A sample read from shared/data/real when the test runs (``index``: one row of a list)."""
    return lambda: real_json(name) if index is None else real_json(name)[index]


#: class name -> (format, sample); each becomes one AdapterConformance suite
SUITES = {
    "TestOpenHandsEvents": ("openhands", real("openhands_basic.json")),
    "TestOpenHandsOutputRecord": ("openhands", openhands_output_record),
    "TestOpenHandsUIExport": ("openhands", real("interop/openhands_ui-export_demo1.json")),
    "TestSWEAgentFunctionCalling": ("swe-agent", real("swe-agent_function_calling_simple.traj")),
    "TestSWEAgentTextActions": ("swe-agent", real("swe-agent_test-repo-i1.traj")),
    "TestMiniSWEAgentMessages": ("mini-swe-agent", real("mini-swe-agent_local.traj.json")),
    "TestMiniSWEAgentV11Dict": ("mini-swe-agent", mini_swe_agent_v11_dict),
    "TestOpenAIChatTauBench": ("openai-chat", real("tau-bench_gpt-4o-airline_tasks0-4.json", 6)),
    "TestOpenAIChatSWEGymRow": ("openai-chat", real("interop/swe-gym_openhands_messages_5rows.json", 1)),
    "TestShareGPT": ("sharegpt", sharegpt),
    "TestWhoAndWhen": ("who-and-when", real("who-and-when/algorithm-generated_1.json")),
    "TestATIFContextSummarization": ("atif", real("interop/atif_terminus2_context-summarization.json")),
    "TestATIFInvalidJSON": ("atif", real("interop/atif_terminus2_invalid-json.json")),
    "TestADPNebius": ("adp", real("interop/adp_nebius_swe-agent.std.json", 0)),
    "TestADPSWEGym": ("adp", real("interop/adp_swe-gym_openhands.std.json", 1)),
    "TestNebiusRow": ("nebius", real("interop/nebius_swe-agent-trajectories_5rows.json", 2)),
}

#: fewer corrupted variants than the default where each is slow: 11,000 token ids and log-probs
#: cost ~7 ms a variant to copy and convert
MAX_MUTATIONS = {"TestATIFContextSummarization": 1000}

for _name, (_format, _sample) in SUITES.items():
    # a module-level class named Test*, so pytest collects it under that name
    globals()[_name] = type(
        _name,
        (AdapterConformance,),
        {
            "format": _format,
            "sample": staticmethod(_sample),
            "max_mutations": MAX_MUTATIONS.get(_name, AdapterConformance.max_mutations),
        },
    )


def test_every_registered_adapter_has_a_suite():
    covered = {cls.format for cls in AdapterConformance.__subclasses__()}
    assert set(names()) <= covered, f"adapters without a conformance suite: {set(names()) - covered}"
