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


class TestOpenHandsEvents(AdapterConformance):
    format = "openhands"

    def sample(self):
        return real_json("openhands_basic.json")


class TestOpenHandsOutputRecord(AdapterConformance):
    format = "openhands"

    def sample(self):
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


class TestSWEAgentFunctionCalling(AdapterConformance):
    format = "swe-agent"

    def sample(self):
        return real_json("swe-agent_function_calling_simple.traj")


class TestSWEAgentTextActions(AdapterConformance):
    format = "swe-agent"

    def sample(self):
        return real_json("swe-agent_test-repo-i1.traj")


class TestMiniSWEAgentMessages(AdapterConformance):
    format = "mini-swe-agent"

    def sample(self):
        return real_json("mini-swe-agent_local.traj.json")


class TestMiniSWEAgentV11Dict(AdapterConformance):
    format = "mini-swe-agent"

    def sample(self):
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


class TestOpenAIChatTauBench(AdapterConformance):
    format = "openai-chat"

    def sample(self):
        return real_json("tau-bench_gpt-4o-airline_tasks0-4.json")[6]


class TestShareGPT(AdapterConformance):
    format = "sharegpt"

    def sample(self):
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


class TestWhoAndWhen(AdapterConformance):
    format = "who-and-when"

    def sample(self):
        return real_json("who-and-when/algorithm-generated_1.json")


class TestATIFContextSummarization(AdapterConformance):
    format = "atif"
    max_mutations = 1000  # 11,000 token ids and log-probs: each variant costs ~7 ms to copy and convert

    def sample(self):
        return real_json("interop/atif_terminus2_context-summarization.json")


class TestATIFInvalidJSON(AdapterConformance):
    format = "atif"

    def sample(self):
        return real_json("interop/atif_terminus2_invalid-json.json")


class TestADPNebius(AdapterConformance):
    format = "adp"

    def sample(self):
        return real_json("interop/adp_nebius_swe-agent.std.json")[0]


class TestADPSWEGym(AdapterConformance):
    format = "adp"

    def sample(self):
        return real_json("interop/adp_swe-gym_openhands.std.json")[1]


class TestNebiusRow(AdapterConformance):
    format = "nebius"

    def sample(self):
        return real_json("interop/nebius_swe-agent-trajectories_5rows.json")[2]


class TestOpenAIChatSWEGymRow(AdapterConformance):
    format = "openai-chat"

    def sample(self):
        return real_json("interop/swe-gym_openhands_messages_5rows.json")[1]


class TestOpenHandsUIExport(AdapterConformance):
    format = "openhands"

    def sample(self):
        return real_json("interop/openhands_ui-export_demo1.json")


def test_every_registered_adapter_has_a_suite():
    covered = {cls.format for cls in AdapterConformance.__subclasses__()}
    assert set(names()) <= covered, f"adapters without a conformance suite: {set(names()) - covered}"
