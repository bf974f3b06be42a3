"""Greedy partition: the hint for CP-SAT and the fallback when it finds nothing in time.
Balanced stages (remainder to the middle ones), then per rank the fewest fully recomputed
blocks that fit its memory, added one stage at a time round-robin."""

from __future__ import annotations

from cost_model.rank_costs import StageProblem
from cost_model.stages import balanced_stage_layers, slices_from_counts


def greedy_partition(p: StageProblem) -> tuple[list[int], list[int]] | None:
    counts = balanced_stage_layers(p.num_layers, p.num_stages)
    rcs = [0] * p.num_stages
    for r in range(p.pp):
        ks = p.stages_of(r)
        while p.rank_cost(slices_from_counts(counts, rcs), r).peak_bytes > p.capacity_bytes:
            if not p.full:
                return None
            open_ks = [k for k in ks if rcs[k] < counts[k]]
            if not open_ks:
                return None
            k = min(open_ks, key=lambda k: (rcs[k] / counts[k], k))
            rcs[k] += 1
    return counts, rcs
