"""Megatron's pipeline orders: which (micro-batch, model chunk) each pipeline rank runs when,
for GPipe, 1F1B and interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py
get_schedule_table and forward_backward_pipelining_with_interleaving at NVIDIA/Megatron-LM
d98e8a64ddf3). A leaf: the in-flight memory, the stage composition and the simulator read it.
"""

from __future__ import annotations

from cost_model.specs.vocab import SCHEDULE_GPIPE, SCHEDULE_INTERLEAVED


def interleaved_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """Megatron get_schedule_table: virtual micro-batch id -> (micro-batch, model chunk)."""
    table: list[tuple[int, int]] = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        table.extend((mb, chunk) for chunk in range(vpp) for mb in range(lo, hi))
    return table


def warmup_forwards(schedule: str, pp: int, rank: int, m: int, vpp: int = 1, group: int | None = None,
                    warmup_extra: int = 0) -> tuple[int, int]:
    """(warm-up forwards, forwards in all) of one rank in rank_order: its steady 1F1B pairs
    are the forward of entry warm + k with the backward of entry k, k < total - warm."""
    if schedule == SCHEDULE_GPIPE:
        return m, m
    if schedule == SCHEDULE_INTERLEAVED and vpp > 1:
        total = m * vpp
        return min(total, 2 * (pp - rank - 1) + (vpp - 1) * (group or pp) + warmup_extra), total
    return min(m, pp - rank - 1 + warmup_extra), m


def rank_order(schedule: str, pp: int, rank: int, m: int, vpp: int = 1, group: int | None = None,
               warmup_extra: int = 0) -> list[tuple[str, int, int]]:
    """The op sequence of one pipeline rank: (F|B, micro-batch, chunk). `warmup_extra`
    forwards are added to the warm-up (in_flight.interleaved_live_chunks; without pipelining
    Megatron's combined_1f1b_schedule_for_no_pipelining runs the first forward alone, then
    each forward with the previous micro-batch's backward)."""
    if schedule == SCHEDULE_GPIPE:
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    warm, total = warmup_forwards(schedule, pp, rank, m, vpp, group, warmup_extra)
    if schedule == SCHEDULE_INTERLEAVED and vpp > 1:
        table = interleaved_table(m, vpp, group or pp)
        fwd = [("F", mb, c) for mb, c in table]
        bwd = [("B", mb, vpp - 1 - c) for mb, c in table]
    else:  # pp = 1 with warmup_extra: the first forward alone, then (F i+1, B i)
        fwd = [("F", i, 0) for i in range(m)]
        bwd = [("B", i, 0) for i in range(m)]
    order = fwd[:warm]
    for k in range(total - warm):
        order.append(fwd[warm + k])
        order.append(bwd[k])
    order.extend(bwd[total - warm:])
    return order
