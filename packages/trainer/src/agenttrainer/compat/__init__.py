"""The product documents' (seeds') public names, as thin aliases over knowlyr-trainer's real API.

* :mod:`agenttrainer.compat.hello_agents_rl` — seed 002, ``hello_agents.rl`` / ``hello_agents.tools``:
  ``create_sft_dataset``, ``create_rl_dataset``, ``create_accuracy_reward``, ``create_lora_config``,
  ``SFTTrainerWrapper``, ``GRPOTrainerWrapper``, ``RLTrainingTool``.
* :mod:`agenttrainer.compat.agent_training` — seed 003, ``sage.tools.agent_training``:
  ``AgentSFTConfig``, ``AgentSFTTrainer`` / ``AgentLoRATrainer``, ``RLTrainingConfig``, and (with
  knowlyr-reward installed) ``AgentRewardConfig`` / ``AgentRewardModel``.

A seed snippet runs once its import line names the module, e.g. ``from hello_agents.rl import X``
becomes ``from agenttrainer.compat.hello_agents_rl import X``. ``docs/seed-api.md`` maps every name.
"""
