"""Brute-force reference search (`planner plan --exhaustive`): every candidate of the space,
every contiguous stage partition, every per-stage recompute count, each costed by the float
cost model (cost_model.pipeline.stages). For small instances only; the planner's tests prove CP-SAT
reaches the same optimum.

The objective increases with every chunk's forward and backward time and the memory limit
is per rank. With one stage per rank (v = 1) it reads each rank only through its time and
tail, so for a fixed partition each rank's recompute counts are chosen independently (the
fastest combination that fits): the same optimum as the full cross product, searched rank
by rank. Interleaved (v > 1), the step reads every chunk's time (stages.pipeline_time_s),
so each rank keeps its feasible combinations that no other feasible one beats on every
chunk and the tail, and the cross product of those is costed.

The work is counted exactly before it starts (`count_evaluations`: one evaluation is one
stages.rank_cost call), and a search above MAX_EVALUATIONS is refused.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from functools import lru_cache

from cost_model.pipeline.rank_costs import StageProblem, uniform_recompute_counts
from cost_model.pipeline.stages import empty_end_layouts, slices_from_counts, step_time_s
from cost_model.specs.errors import SpecError

# About 1.5 minutes: one evaluation (stages.rank_cost plus its share of building the layer
# tables) took ~45 microseconds on one core here (8 layers, 16 GPUs: 543,808 in 24 s).
MAX_EVALUATIONS = 2_000_000


def compositions(n: int, k: int):
    """All ways to write n as an ordered sum of k positive integers."""
    for cuts in itertools.combinations(range(1, n), k - 1):
        prev, out = 0, []
        for c in (*cuts, n):
            out.append(c - prev)
            prev = c
        yield out


def _times(a: list[int], b: list[int]) -> list[int]:
    """Product of two power series truncated to the length of `a`."""
    n = len(a)
    out = [0] * n
    for i, x in enumerate(a):
        if x:
            for j in range(n - i):
                out[i + j] += x * b[j]
    return out


def best_empty_end_partition(p: StageProblem) -> tuple[float, list[int], list[int]] | None:
    """The fastest feasible (counts, recompute counts) of a problem with more stages than
    blocks, and its step time: every empty-end layout, with full recompute every engine-wide
    count (none or every block, each stage holding at most one; the engines that build empty
    stages take one count, Megatron, or none or all, torchtitan). Exact, and at most 4
    partitions priced: the search's solve of these candidates (no CP-SAT)."""
    best = None
    for counts in empty_end_layouts(p.num_layers, p.num_stages) if p.empty_ends else []:
        for n in (0, 1) if p.full else (0,):
            rcs = uniform_recompute_counts(counts, n)
            slices = slices_from_counts(counts, rcs)
            ranks = [p.rank_cost(slices, r) for r in range(p.pp)]
            if any(rc.peak_bytes > p.capacity_bytes for rc in ranks):
                continue
            t = step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule)
            if best is None or t < best[0] - 1e-15:
                best = (t, counts, rcs)
    return best


@lru_cache(maxsize=1024)
def count_evaluations(L: int, S: int, pp: int, full: bool, empty_ends: bool = False) -> int:
    """Exactly the rank_cost calls `best_partition` makes: for every composition of L into
    S stages, each rank tries prod_{k on the rank} (counts[k] + 1) recompute combinations
    under full recompute, one otherwise. Summed over compositions with generating
    functions: a stage of c >= 1 blocks is x^c, weighted by (c + 1) on a recomputing rank,
    and every rank holds S/pp stages. With more stages than blocks on an engine that builds
    empty ends (`empty_ends`), best_empty_end_partition's: every rank per layout and count."""
    if S > L and empty_ends:
        return len(empty_end_layouts(L, S)) * (2 if full else 1) * pp
    if S > L or S < 1:
        return 0
    if not full:
        return math.comb(L - 1, S - 1) * pp
    plain = [0] + [1] * L
    weighted = [0] + [c + 1 for c in range(1, L + 1)]
    per_rank = S // pp
    series = [1] + [0] * L
    for _ in range(per_rank):
        series = _times(series, weighted)
    for _ in range(S - per_rank):
        series = _times(series, plain)
    return pp * series[L]


def check_size(shapes: Iterable[tuple[int, int, int, bool, bool]]) -> int:
    """The most evaluations of the whole search over candidates of (layers, stages, pp,
    full recompute, empty ends) shapes (a partition stops early at a rank that cannot fit);
    SpecError("search") above the limit, with the count, the limit and how to shrink it."""
    shapes = list(shapes)
    work = sum(count_evaluations(*s) for s in shapes)
    if work > MAX_EVALUATIONS:
        raise SpecError(
            "search",
            f"--exhaustive would evaluate up to {work:,} rank costs ({len(shapes):,} candidates x their stage "
            f"partitions and recompute counts), above the limit of {MAX_EVALUATIONS:,}; shrink the search: "
            "pin search.tp / search.pp / search.vpp / search.recompute, use fewer layers or fewer GPUs, "
            "or plan without --exhaustive (CP-SAT reaches the same optimum)",
            allowed=f"<= {MAX_EVALUATIONS:,} evaluations",
        )
    return work


def best_partition(p: StageProblem, tick: Callable[[int], None] | None = None) -> tuple[float, list[int], list[int]] | None:
    """The fastest feasible (counts, recompute counts) and its step time. `tick(n)` is told
    after each stage partition how many rank evaluations it took."""
    L, S, pp = p.num_layers, p.num_stages, p.pp
    if p.more_stages_than_blocks:
        found = best_empty_end_partition(p)
        if tick is not None:
            tick(count_evaluations(L, S, pp, p.full, p.empty_ends))
        return found
    best = None
    for counts in compositions(L, S):
        if p.full and p.uniform_recompute:
            found = _best_uniform(p, counts, tick)
            if found is not None and (best is None or found[0] < best[0] - 1e-15):
                best = found
            continue
        if p.vpp > 1 and p.full:
            found = _best_interleaved(p, counts, tick)
            if found is not None and (best is None or found[0] < best[0] - 1e-15):
                best = found
            continue
        chosen_rc = [0] * S
        ranks = []
        evaluations = 0
        for r in range(pp):
            ks = list(p.stages_of(r))
            options = itertools.product(*[range(counts[k] + 1) for k in ks]) if p.full else [tuple(0 for _ in ks)]
            best_r = None
            for combo in options:
                rc = _fitting_rank_cost(p, counts, chosen_rc, ks, combo, r)
                evaluations += 1
                if rc is None:
                    continue
                key = (rc.time_s, rc.exposed_dp_s + rc.optimizer_s)
                if best_r is None or key < best_r[0]:
                    best_r = (key, combo, rc)
            if best_r is None:
                break
            for k, v in zip(ks, best_r[1], strict=True):
                chosen_rc[k] = v
            ranks.append(best_r[2])
        if tick is not None:
            tick(evaluations)
        if len(ranks) < pp:
            continue
        t = step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule)
        if best is None or t < best[0] - 1e-15:
            best = (t, list(counts), list(chosen_rc))
    return best


def _fitting_rank_cost(p: StageProblem, counts: list[int], base_rcs: list[int], ks: list[int],
                       combo: tuple[int, ...], r: int):
    """Rank r's cost with its stages ks recomputing `combo` blocks (the other stages' counts
    from base_rcs: a rank's cost reads only its own), or None when it does not fit."""
    rcs = list(base_rcs)
    for k, v in zip(ks, combo, strict=True):
        rcs[k] = v
    rc = p.rank_cost(slices_from_counts(counts, rcs), r)
    return None if rc.peak_bytes > p.capacity_bytes else rc


def _best_uniform(p: StageProblem, counts: list[int], tick) -> tuple[float, list[int], list[int]] | None:
    """The fastest feasible engine-wide recompute count n for one stage partition (every
    stage recomputes min(n, its blocks): rank_costs.StageProblem.uniform_recompute)."""
    best = None
    evaluations = 0
    # a rank's cost depends only on its own stages' counts: past its largest stage, a
    # larger n changes nothing there, so each rank is costed max(its stages) + 1 times
    # (no more than best_partition's per-rank search: count_evaluations still bounds it)
    seen: dict[tuple, object] = {}
    for n in p.uniform_counts(counts):
        rcs = uniform_recompute_counts(counts, n)
        slices = slices_from_counts(counts, rcs)
        ranks = []
        for r in range(p.pp):
            key = (r, tuple(rcs[k] for k in p.stages_of(r)))
            if key not in seen:
                seen[key] = p.rank_cost(slices, r)
                evaluations += 1
            ranks.append(seen[key])
        if any(rc.peak_bytes > p.capacity_bytes for rc in ranks):
            continue
        t = step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule)
        if best is None or t < best[0] - 1e-15:
            best = (t, list(counts), rcs)
    if tick is not None:
        tick(evaluations)
    return best


def _best_interleaved(p: StageProblem, counts: list[int], tick) -> tuple[float, list[int], list[int]] | None:
    """Full recompute under interleaving for one stage partition: per rank, every
    recompute combination of its stages (the same rank_cost calls as the rank-by-rank
    search), the feasible ones that no other feasible one matches or beats on every chunk
    time and the tail, then the fastest element of their cross product."""
    S = p.num_stages
    fronts = []
    evaluations = 0
    for r in range(p.pp):
        ks = list(p.stages_of(r))
        kept: list[tuple[tuple[float, ...], tuple[int, ...], object]] = []
        for combo in itertools.product(*[range(counts[k] + 1) for k in ks]):
            rc = _fitting_rank_cost(p, counts, [0] * S, ks, combo, r)
            evaluations += 1
            if rc is None:
                continue
            key = (*rc.chunk_fwd_s, *rc.chunk_bwd_s, rc.exposed_dp_s + rc.optimizer_s)
            if any(all(a <= b for a, b in zip(o, key, strict=True)) for o, _, _ in kept):
                continue
            kept = [x for x in kept if not all(a <= b for a, b in zip(key, x[0], strict=True))]
            kept.append((key, combo, rc))
        if not kept:
            break
        fronts.append((ks, kept))
    if tick is not None:
        tick(evaluations)
    if len(fronts) < p.pp:
        return None
    best = None
    for choice in itertools.product(*[kept for _, kept in fronts]):
        t = step_time_s([rc for _, _, rc in choice], p.num_micro_batches, p.vpp, p.schedule)
        if best is None or t < best[0] - 1e-15:
            rcs = [0] * S
            for (ks, _), (_, combo, _) in zip(fronts, choice, strict=True):
                for k, v in zip(ks, combo, strict=True):
                    rcs[k] = v
            best = (t, list(counts), rcs)
    return best
