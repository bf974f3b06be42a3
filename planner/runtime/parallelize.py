"""Apply the plan's intra-stage parallelism to one model part: recompute and ZeRO-3.

Order per part: the recompute mode of each block (a flag; checkpointing wraps forward and
changes no parameter), TP/SP (tensor_parallel.py, on plain tensors), then FSDP2 on the "dp"
mesh for ZeRO-3, which shards the TP-sliced parameters a second time (torchtitan's order).
ZeRO-1/2 is the distributed optimizer of dist_optimizer.py.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from cost_model.specs.vocab import RECOMPUTE_FULL, RECOMPUTE_NONE
from planner.runtime.plan_io import Stage
from profiler.transformer import Transformer


def apply_recompute(model: Transformer, stage: Stage, mode: str) -> None:
    """full: checkpoint the first `recompute_layers` blocks of the stage (the planner's
    per-stage choice); selective: checkpoint the attention core of every block."""
    for n, block in enumerate(model.layers.values()):
        if mode == RECOMPUTE_FULL:
            block.set_recompute(RECOMPUTE_FULL if n < stage.recompute_layers else RECOMPUTE_NONE)
        else:
            block.set_recompute(mode)


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, zero: int) -> None:
    """ZeRO-3 via FSDP2 on the dp mesh, one FSDP unit per block plus the root: params,
    grads and optimizer state sharded, params re-gathered for backward
    (reshard_after_forward=True). ZeRO-1/2 use dist_optimizer.DistributedOptimizer.
    """
    reshard = zero == 3
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard)


def allreduce_grads(params: list[nn.Parameter], dp_group: dist.ProcessGroup, dp: int) -> None:
    """Plain data parallelism (zero=0): average gradients over the dp group.

    Done by hand rather than with DDP because the pipeline schedules call backward per
    micro-batch and DDP would reduce on each; one bucketed pass after the step is the
    same math. TP slices are plain tensors: every TP rank reduces its own slice with its
    dp peers.
    """
    if dp == 1:
        return
    locals_ = [p.grad for p in params if p.grad is not None]
    if not locals_:
        return
    flat = torch.cat([t.reshape(-1) for t in locals_])
    dist.all_reduce(flat, group=dp_group)
    flat.div_(dp)
    offset = 0
    with torch.no_grad():
        for t in locals_:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n
