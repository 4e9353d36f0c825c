"""Training recipes, one file per method: ``sft``, ``dpo``, ``grpo``."""
