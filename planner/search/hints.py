"""Partitions priced with the float model: a partition's step time, and the best of a few
cheap partitions of a candidate, CP-SAT's hint and the fallback plan when it returns none."""

from __future__ import annotations

import math

from cost_model.pipeline.rank_costs import StageProblem, uniform_recompute_counts
from cost_model.pipeline.stages import slices_from_counts, step_time_s
from planner import exhaustive as brute
from planner.deadline import NO_DEADLINE, Deadline
from planner.greedy import greedy_partition, repair_partition


def step_s(p: StageProblem, counts: list[int], rcs: list[int]) -> float | None:
    """The float model's step time of a partition, None when a rank does not fit."""
    slices = slices_from_counts(counts, rcs)
    ranks = [p.rank_cost(slices, r) for r in range(p.pp)]
    if any(rc.peak_bytes > p.capacity_bytes for rc in ranks):
        return None
    return step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule)


def _least_recompute(p: StageProblem, counts: list[int], deadline: Deadline) -> list[int] | None:
    """Per-stage recompute counts that make `counts` fit: the engine's one count n (the
    least that fits every rank) when it takes one, else greedy_partition's per-rank rule."""
    if not p.full:
        return [0] * len(counts) if step_s(p, counts, [0] * len(counts)) is not None else None
    if p.uniform_recompute:
        for n in p.uniform_counts(counts):
            deadline.check("a hint's recompute")
            rcs = uniform_recompute_counts(counts, n)
            if step_s(p, counts, rcs) is not None:
                return rcs
        return None
    rcs = [0] * len(counts)
    for r in range(p.pp):
        ks = p.stages_of(r)
        while p.rank_cost(slices_from_counts(counts, rcs), r).peak_bytes > p.capacity_bytes:
            deadline.check("a hint's recompute")
            open_ks = [k for k in ks if rcs[k] < counts[k]]
            if not open_ks:
                return None
            k = min(open_ks, key=lambda k: (rcs[k] / counts[k], k))
            rcs[k] += 1
    return rcs


def _count_patterns(L: int, S: int) -> list[list[int]]:
    """A few stage-size patterns beside the balanced one: the remainder on the first or the
    last stages, or every stage at the ceiling but the first / last ones, which hold the
    embedding / the output layer (and give up the surplus)."""
    q, r = divmod(L, S)
    out = [[q + 1] * r + [q] * (S - r), [q] * (S - r) + [q + 1] * r]
    if r:
        for from_end in (True, False):
            counts, surplus = [q + 1] * S, S * (q + 1) - L
            order = range(S - 1, -1, -1) if from_end else range(S)
            for k in order:
                take = min(surplus, counts[k] - 1)
                counts[k] -= take
                surplus -= take
            out.append(counts)
    return [c for c in out if min(c) >= 1]


def best_hint(p: StageProblem, deadline: Deadline = NO_DEADLINE) -> tuple[list[int], list[int]] | None:
    """The best of greedy_partition (else repair_partition) and the patterns of
    `_count_patterns` (each with its least recompute) under the float model: the CP-SAT hint,
    and the fallback plan when CP-SAT returns nothing in time. Only a starting point: optimality is CP-SAT's to prove.
    With more stages than blocks, the best of the empty-end layouts (exhaustive.best_empty_end_partition).
    `deadline`: the solve's hard deadline, checked in every loop here (DeadlineExceeded past it)."""
    if p.more_stages_than_blocks:
        best = brute.best_empty_end_partition(p)
        return None if best is None else (best[1], best[2])
    tried = []
    g = greedy_partition(p, deadline)
    if g is not None:
        tried.append(g)
    if g is None:
        # balanced stages fit nowhere, not even with recompute where that is an option:
        # moving blocks off the full ranks may fit them (without recompute, where balanced
        # stages fit, the repair would return greedy_partition's partition again)
        fixed = repair_partition(p, deadline)
        if fixed is not None:
            tried.append(fixed)
    for counts in _count_patterns(p.num_layers, p.num_stages):
        rcs = _least_recompute(p, counts, deadline)
        if rcs is not None:
            tried.append((counts, rcs))
    best, best_t = None, math.inf
    for counts, rcs in tried:
        deadline.check("a hint")
        rcs = p.engine_counts(counts, rcs)
        t = step_s(p, counts, rcs)
        if t is not None and t < best_t:
            best, best_t = (list(counts), list(rcs)), t
    return best if best is not None else g
