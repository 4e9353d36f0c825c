"""torchrun worker for test_fsdp_cpu.py: one SFT backward with FSDP2-sharded parameters (gloo).

Each rank takes its own packed sequences; the loss is normalised by the global token count over
the number of processes (the recipes' convention), so the averaged gradients equal one process
on the whole batch. Rank 0 writes the full (unsharded) gradients to ``argv[1]``.
"""

import sys

import torch
import torch.distributed as dist
from test_fsdp_cpu import examples
from torch.distributed.fsdp import fully_shard

from agenttrainer.data import pack
from agenttrainer.losses import sft_loss
from agenttrainer.models import build_tiny_model
from agenttrainer.models.attention import HiddenStates


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, _ = build_tiny_model(seed=0)
    module = HiddenStates(model)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(module)
    data = examples()
    total = sum(ex.num_trainable for ex in data)
    batch = pack(data[rank::world])
    hidden = module(batch["input_ids"], batch["position_ids"], batch["seq_ids"])
    weight, bias = module.lm_head()
    loss, _ = sft_loss(hidden, weight, batch["labels"], lm_head_bias=bias, num_items=total / world)
    loss.backward()
    grads = {n: p.grad.full_tensor() for n, p in module.named_parameters()}
    if rank == 0:
        torch.save(grads, sys.argv[1])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
