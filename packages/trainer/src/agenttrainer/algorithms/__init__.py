"""Policy-gradient algorithms, one module each, behind a registry: name -> advantages + loss.

Each module (``grpo``, ``dr_grpo``, ``rloo``, ``ppo``, ``rft``, ...) holds one algorithm's
advantages and loss, derived in its docstring, and registers it; ``algorithm_names()`` and ``summaries()``
list what is registered. ``dpo`` holds the preference losses (DPO, SLiC hinge, IPO) of the DPO
recipe; ``steps`` spreads an episode's advantage over its steps. Every GRPO driver takes its
algorithm from ``get_algorithm(name)``: the offline recipe (``knowlyr-trainer grpo --algorithm ...``,
algorithms that compare a group), online RL (``grpo --online``, all of them) and
``GRPOTrainerWrapper`` (through the offline recipe).

A new algorithm is one module here that calls ``register_algorithm(Algorithm(...))``: every module of this
package is imported below, so it is registered and shows up in ``--algorithm``'s choices.

Example:
    >>> from agenttrainer import algorithms
    >>> algorithms.get_algorithm("rloo").advantages([1.0, 0.0, 0.0, 1.0], [None] * 4, [True] * 4)
    [0.6666666666666666, -0.6666666666666666, -0.6666666666666666, 0.6666666666666666]
"""

import importlib
import pkgutil

from agenttrainer.algorithms.registry import Algorithm, algorithm_names, get_algorithm, register_algorithm, summaries

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Algorithm", "algorithm_names", "get_algorithm", "register_algorithm", "summaries"]
