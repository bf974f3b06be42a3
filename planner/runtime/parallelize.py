"""Apply the plan's intra-stage parallelism to one model part: TP/SP, recompute, ZeRO.

Order matters and follows torchtitan's: tensor parallel first (turns weights into DTensors
on the "tp" mesh), then activation checkpointing (wraps forward, no parameter changes),
then FSDP2 on the "dp" mesh (shards the already TP-sharded DTensors a second time).
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

from planner.runtime.plan_io import Stage
from profiler.blocks import Transformer


def apply_tp(model: Transformer, tp_mesh: DeviceMesh, sequence_parallel: bool) -> None:
    """Megatron-style TP: column-parallel q/k/v and w1/w3, row-parallel wo and w2.

    With sequence parallelism the residual stream between blocks (and between pipeline
    stages) stays sharded on the sequence dim; norms run on the shard, and the
    column-parallel inputs all-gather it (Korthikanti et al. 2022, sec. 4.2.2).
    Without it the residual stream is replicated on every TP rank.
    """
    sp = sequence_parallel
    seq = Shard(1) if sp else Replicate()
    plan: dict[str, object] = {}
    if model.tok_embeddings is not None:
        # Vocab-sharded embedding; its partial sums are reduce-scattered onto seq under SP.
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.output is not None:
        if sp:
            plan["norm"] = SequenceParallel()
        # Vocab-parallel logits stay sharded (a Shard(-1) DTensor); the loss is computed
        # under loss_parallel() (see `tp_loss_context`), as Megatron's vocab-parallel
        # cross-entropy does, instead of gathering [b, s, vocab] logits on every rank.
        plan["output"] = ColwiseParallel(
            input_layouts=seq, output_layouts=Shard(-1), use_local_output=False
        )
    if plan:
        parallelize_module(model, tp_mesh, plan)
    for block in model.layers.values():
        bplan: dict[str, object] = {
            # One gathered DTensor input is shared by wq/wk/wv (and w1/w3): their partial
            # input-gradients add up as one Partial DTensor and are reduced once per
            # sub-layer in backward (Megatron's f/g operators, Shoeybi et al. 2019 fig. 3;
            # with SP one reduce-scatter, Korthikanti et al. 2022 fig. 5). Handing each
            # projection a local tensor instead would all-reduce every projection's grad.
            "attention": PrepareModuleInput(
                input_layouts=(seq, None, None),
                desired_input_layouts=(Replicate(), None, None),
                use_local_output=False,
            ),
            "feed_forward": PrepareModuleInput(
                input_layouts=(seq,),
                desired_input_layouts=(Replicate(),),
                use_local_output=False,
            ),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=seq),
        }
        if block.feed_forward.w3 is not None:
            bplan["feed_forward.w3"] = ColwiseParallel()
        if sp:
            bplan["attention_norm"] = SequenceParallel()
            bplan["ffn_norm"] = SequenceParallel()
        parallelize_module(block, tp_mesh, bplan)
    if sp:
        model.seq_shards = tp_mesh.size()


def tp_loss_context(tp: int):
    """Context for forward+backward of the loss: loss_parallel() when the logits are
    vocab-sharded (tp > 1), else a no-op."""
    return loss_parallel() if tp > 1 else contextlib.nullcontext()


def apply_recompute(model: Transformer, stage: Stage, mode: str) -> None:
    """full: checkpoint the first `recompute_layers` blocks of the stage (the planner's
    per-stage choice); selective: checkpoint the attention core of every block."""
    for n, block in enumerate(model.layers.values()):
        if mode == "full":
            block.set_recompute("full" if n < stage.recompute_layers else "none")
        else:
            block.set_recompute(mode)


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, zero: int) -> None:
    """ZeRO via FSDP2 on the dp mesh, one FSDP unit per block plus the root.

    zero=3 shards params, grads and optimizer state and re-gathers params in backward
    (reshard_after_forward=True). FSDP2 has no separate ZeRO-1/2 mode: parameters are
    always stored sharded. The closest is reshard_after_forward=False, which keeps the
    gathered parameters from forward to backward (no second all-gather), as ZeRO-1/2 do;
    grads and optimizer state remain sharded.
    """
    reshard = zero == 3
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard)


def allreduce_grads(params: list[nn.Parameter], dp_group: dist.ProcessGroup, dp: int) -> None:
    """Plain data parallelism (zero=0): average gradients over the dp group.

    Done by hand rather than with DDP because the pipeline schedules call backward per
    micro-batch and DDP would reduce on each; one bucketed pass after the step is the
    same math. Grads of TP-sharded params are DTensors; their local shards are reduced
    (every TP rank reduces its own shard with its dp peers).
    """
    if dp == 1:
        return
    locals_ = []
    with torch.no_grad():  # to_local() then returns the shard itself, so writes land in it
        for p in params:
            if p.grad is not None:
                g = p.grad
                locals_.append(g.to_local() if isinstance(g, DTensor) else g)
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
