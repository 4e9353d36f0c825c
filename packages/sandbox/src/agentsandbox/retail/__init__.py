"""The retail environment (``knowlyr/retail``): a shop in an embedded SQLite database."""

from agentsandbox.retail.db import CANCEL_REASONS, open_shop, state_digest
from agentsandbox.retail.env import RETAIL_PROFILE, SYSTEM_PROMPT, RetailEnv

__all__ = ["CANCEL_REASONS", "RETAIL_PROFILE", "SYSTEM_PROMPT", "RetailEnv", "open_shop", "state_digest"]
