"""ZeRO-1/2 as a distributed optimizer: the step the cost model prices for zero 1 and 2.

Megatron-LM's distributed optimizer (docs/source/api-guide/dist_optimizer.md; Rajbhandari
et al. 2020, ZeRO sec. 5.1-5.2): every data-parallel rank keeps whole parameters and
accumulates whole gradients over the micro-batches; once per step the flat gradient buffer
is reduce-scattered (each rank receives the dp-average of its 1/dp slice), the optimizer
updates only that slice of a flat fp32 master copy, and the updated slices are all-gathered
back into the parameters. One reduce-scatter plus one all-gather per step, the same volume
as ZeRO-0's all-reduce, with 1/dp of the optimizer state and optimizer work per rank
(cost_model/terms/dp.py `grad_sync_s`, `cost_model/engines/states.py`).

ZeRO-2 also frees the gradient outside the owned slice; this runtime times ZeRO-2 with the
same step, as the cost model does (same collectives, less memory). ZeRO-3 (parameters
sharded between uses) stays with FSDP2 (parallelize.apply_fsdp).

Adam is elementwise, so updating slices gives the same numbers as updating the whole.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn


class DistributedOptimizer:
    """Wraps `make_opt` (a torch optimizer factory) around this rank's slice of a flat fp32
    copy of `params`; `step()` does reduce-scatter, the sliced update and all-gather."""

    def __init__(
        self,
        params: list[nn.Parameter],
        dp_group: dist.ProcessGroup,
        dp: int,
        make_opt: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    ):
        self.params = params
        self.group = dp_group
        self.dp = dp
        self.rank = dist.get_rank(dp_group)
        # plain tensors: TP slices are ordinary parameters (tensor_parallel.py)
        locals_ = [p.detach() for p in params]
        self.numels = [t.numel() for t in locals_]
        total = sum(self.numels)
        self.padded = -(-total // dp) * dp  # reduce-scatter needs equal slices
        self.slice_numel = self.padded // dp
        device = locals_[0].device if locals_ else torch.device("cpu")
        lo = self.rank * self.slice_numel
        with torch.no_grad():
            flat = self._flatten(locals_, device)
            self.master = nn.Parameter(flat[lo : lo + self.slice_numel].float().clone())
        self.grad_slice = torch.zeros_like(self.master)
        self.opt = make_opt([self.master])

    def _flatten(self, tensors: list[torch.Tensor], device) -> torch.Tensor:
        flat = torch.zeros(self.padded, device=device, dtype=torch.float32)
        offset = 0
        for t, n in zip(tensors, self.numels, strict=True):
            flat[offset : offset + n].copy_(t.reshape(-1))
            offset += n
        return flat

    def _local_grads(self) -> list[torch.Tensor]:
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        device = self.master.device
        flat_grad = self._flatten(self._local_grads(), device)
        # sum of the dp ranks' gradients for this rank's slice, then the dp average
        dist.reduce_scatter_tensor(self.grad_slice, flat_grad, group=self.group)
        # freed before the gathered copy below is allocated: the step holds one flat fp32
        # buffer at a time (cost_model/engines/states.py prices 4 bytes per parameter)
        del flat_grad
        self.grad_slice.div_(self.dp)
        self.master.grad = self.grad_slice
        self.opt.step()
        # every rank receives every updated slice and writes it into its parameters
        full = torch.empty(self.padded, device=device, dtype=torch.float32)
        dist.all_gather_into_tensor(full, self.master.detach(), group=self.group)
        offset = 0
        for p, n in zip(self.params, self.numels, strict=True):
            p.copy_(full[offset : offset + n].view_as(p))
            offset += n

    @torch.no_grad()
    def gather_grads(self) -> None:
        """Diagnostics only (outside the timed step): write the dp-averaged gradients back
        into every parameter's .grad, so a gradient norm sees what the update used."""
        device = self.master.device
        full = torch.empty(self.padded, device=device, dtype=torch.float32)
        dist.all_gather_into_tensor(full, self.grad_slice, group=self.group)
        offset = 0
        for p, n in zip(self.params, self.numels, strict=True):
            if p.grad is not None:
                p.grad.copy_(full[offset : offset + n].view_as(p.grad))
            offset += n
