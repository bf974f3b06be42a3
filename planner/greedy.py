"""Greedy partition: the hint for CP-SAT and the fallback when it finds nothing in time.
Balanced stages (remainder to the middle ones), then per rank the fewest fully recomputed
blocks that fit its memory, added one stage at a time round-robin."""

from __future__ import annotations

from cost_model.stages import balanced_stage_layers, rank_cost, slices_from_counts

from .ilp import StageProblem


def greedy_partition(p: StageProblem) -> tuple[list[int], list[int]] | None:
    S, pp = p.num_stages, p.pp
    counts = balanced_stage_layers(p.num_layers, S)
    rcs = [0] * S
    for r in range(pp):
        ks = list(range(r, S, pp))
        while True:
            slices = slices_from_counts(counts, rcs)
            rc = rank_cost(p.table, slices, r, pp, p.recompute, p.schedule, p.num_micro_batches, p.vpp, p.reserved_bytes, p.interference)
            if rc.peak_bytes <= p.capacity_bytes:
                break
            if p.recompute != "full":
                return None
            open_ks = [k for k in ks if rcs[k] < counts[k]]
            if not open_ks:
                return None
            k = min(open_ks, key=lambda k: (rcs[k] / counts[k], k))
            rcs[k] += 1
    return counts, rcs
