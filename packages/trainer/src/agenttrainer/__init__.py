"""knowlyr-trainer."""
