"""Pipeline parallelism with torch.distributed.pipelining and the planned stage split.

Virtual stage k (of pp*vpp, in model order) lives on pp rank k % pp, the placement of
Megatron's and torch's interleaved schedules; with vpp=1 that is one stage per rank. The V
schedules (zbv, dualpipev) put stages r and 2pp-1-r on rank r (order.stage_rank, torch's
generate_stage_to_rank_mapping style "v"). The zero-bubble family runs torch's own classes
(ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV), which split each
backward into its input- and weight-gradient parts (pipelining/_backward.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleDualPipeV,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
)

from cost_model.pipeline.order import stage_rank
from cost_model.specs.vocab import (
    SCHEDULE_1F1B,
    SCHEDULE_DUALPIPEV,
    SCHEDULE_INTERLEAVED,
    SCHEDULE_ZB1P,
    SCHEDULE_ZBV,
)
from planner.runtime.plan_io import RunPlan

# the multi-stage classes of the zero-bubble family (cost_model/engines/support.py, runtime)
_SPLIT_CLASSES = {SCHEDULE_ZB1P: ScheduleInterleavedZeroBubble, SCHEDULE_ZBV: ScheduleZBVZeroBubble,
                  SCHEDULE_DUALPIPEV: ScheduleDualPipeV}


def local_stage_ids(plan: RunPlan, pp_rank: int) -> list[int]:
    par = plan.parallelism
    return [k for k in range(len(plan.stages)) if stage_rank(k, par.pp, par.schedule) == pp_rank]


def build_schedule(
    plan: RunPlan,
    parts: dict[int, nn.Module],
    pp_group,
    device: torch.device,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
):
    """One PipelineStage per local model part, driven by the planned schedule.

    Stage shapes are inferred from the first micro-batch (dynamic mode), which also
    covers sequence-parallel stages whose boundary tensors are sequence shards.
    scale_grads=True divides grads by the micro-batch count, matching a loss that is the
    mean over micro-batches.
    """
    par = plan.parallelism
    n = len(plan.stages)
    stages = [
        PipelineStage(part, k, n, device, group=pp_group) for k, part in sorted(parts.items())
    ]
    nmb = par.num_micro_batches
    if par.schedule == SCHEDULE_INTERLEAVED:
        return ScheduleInterleaved1F1B(stages, n_microbatches=nmb, loss_fn=loss_fn)
    if par.schedule in _SPLIT_CLASSES:
        return _SPLIT_CLASSES[par.schedule](stages, n_microbatches=nmb, loss_fn=loss_fn)
    # With fewer micro-batches than stages, 1F1B's warm-up (min(pp - rank - 1, m) forwards,
    # Megatron-LM megatron/core/pipeline_parallel/schedules.py
    # forward_backward_pipelining_without_interleaving) covers every micro-batch, so the
    # order is all forwards then all backwards: GPipe's, with the same time and in-flight
    # memory. torch's Schedule1F1B refuses m < pp, so that case runs as ScheduleGPipe.
    one_f_one_b = par.schedule == SCHEDULE_1F1B and nmb >= par.pp
    cls = Schedule1F1B if one_f_one_b else ScheduleGPipe
    return cls(stages[0], n_microbatches=nmb, loss_fn=loss_fn)
