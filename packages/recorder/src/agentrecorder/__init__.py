"""knowlyr-recorder: real agent logs into standard knowlyr trajectories."""

__version__ = "0.1.0"
