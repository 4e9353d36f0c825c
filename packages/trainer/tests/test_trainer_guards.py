"""``check_finite`` refuses the optimizer step of a non-finite loss or gradient norm with a
``NonFiniteLossError`` (a ``TrainerError`` and, as before, a ``FloatingPointError``)."""

import pytest
import torch

from agenttrainer.errors import TrainerError
from agenttrainer.trainers.guards import NonFiniteLossError, check_finite


@pytest.mark.parametrize(
    ("loss", "grad_norm", "says"),
    [(float("nan"), None, "loss is nan"), (1.0, torch.tensor(float("inf")), "gradient norm is inf")],
)
def test_non_finite_step_is_refused(loss, grad_norm, says):
    with pytest.raises(NonFiniteLossError, match=f"step 7: {says}") as raised:
        check_finite(7, loss, grad_norm)
    assert isinstance(raised.value, TrainerError) and isinstance(raised.value, FloatingPointError)


def test_finite_step_passes():
    check_finite(1, 0.5, torch.tensor(2.0))
