"""Where a model of ours acts: one engine, one local policy, the generators, and the factory.

- ``engine.py``: ``ActingEngine``, the KV cache kept across turns and calls (a prompt that
  extends an earlier one prefills only its new tokens; shared prefixes once; finished rows leave
  the decode batch).
- ``generators.py``: token ids in, sampled ids and log-probs out. ``LocalGenerator`` (an
  in-process model, through the engine) and ``ServerGenerator`` (a serving engine that speaks
  token ids: vLLM, ``knowlyr-trainer serve``).
- ``chat.py``: an episode's chat, which message carries each observation and its token ids turn
  by turn (``ChatTokens``).
- ``policy.py``: ``TokenPolicy``, the local policy. Evaluation (``knowlyr-hub evaluate``),
  collection, the demo, online RL and the seed wrappers all act through it, so greedy evaluation
  and RL rollouts of one checkpoint take the same actions.
- ``inference.py``: ``AgentInference``, chat completions with a local model (``knowlyr-trainer
  serve``'s chat endpoint, a local judge) and ``create_agent``, the seed API's agent (a
  ``TokenPolicy``).
- ``spec.py``: ``policy_from_spec``, the policy a command line names (an alias, a checkpoint, an
  endpoint URL); knowlyr-hub's one door into the trainer.

A model someone else serves is acted with by knowlyr-core's ``EndpointPolicy``, the other
model-backed policy of the house.
"""

from agenttrainer.acting.chat import (
    ChatTokens,
    TemplateError,
    action_from_answer,
    chat_template_tools,
    observation_message,
)
from agenttrainer.acting.engine import ActingEngine
from agenttrainer.acting.generators import (
    GenerationError,
    Generator,
    LocalGenerator,
    ServerGenerator,
    TokenSample,
    check_sample,
)
from agenttrainer.acting.inference import AgentInference, Completion
from agenttrainer.acting.policy import TokenPolicy, TokenRecord
from agenttrainer.acting.spec import policy_from_spec

__all__ = [
    # the factory
    "policy_from_spec",
    # the local policy and its records
    "TokenPolicy",
    "TokenRecord",
    # generation: the engine and the generators
    "ActingEngine",
    "GenerationError",
    "Generator",
    "LocalGenerator",
    "ServerGenerator",
    "TokenSample",
    "check_sample",
    # the chat
    "ChatTokens",
    "TemplateError",
    "action_from_answer",
    "chat_template_tools",
    "observation_message",
    # chat completions and the seed API's agent
    "AgentInference",
    "Completion",
]
