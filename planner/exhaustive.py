"""Brute-force reference search (`planner plan --exhaustive`): every candidate of the space,
every contiguous stage partition, every per-stage recompute count, each costed by the float
cost model (cost_model.stages). For small instances only; the planner's tests prove CP-SAT
reaches the same optimum.

The objective increases with every rank's time and the memory limit is per rank, so for a
fixed partition each rank's recompute counts are chosen independently (the fastest
combination that fits): the same optimum as the full cross product, searched rank by rank.
"""

from __future__ import annotations

import itertools
import math

from cost_model.errors import SpecError
from cost_model.stages import rank_cost, slices_from_counts, step_time_s

from .ilp import StageProblem

MAX_EVALUATIONS = 2_000_000


def compositions(n: int, k: int):
    """All ways to write n as an ordered sum of k positive integers."""
    for cuts in itertools.combinations(range(1, n), k - 1):
        prev, out = 0, []
        for c in (*cuts, n):
            out.append(c - prev)
            prev = c
        yield out


def count_work(L: int, S: int, full: bool) -> int:
    parts = math.comb(L - 1, S - 1)
    per = (L // S + 1) ** min(S, 4) if full else 1
    return parts * max(1, per)


def best_partition(p: StageProblem) -> tuple[float, list[int], list[int]] | None:
    """The fastest feasible (counts, recompute counts) and its step time."""
    L, S, pp = p.num_layers, p.num_stages, p.pp
    full = p.recompute == "full"
    best = None
    for counts in compositions(L, S):
        chosen_rc = [0] * S
        ranks = []
        ok = True
        for r in range(pp):
            ks = list(range(r, S, pp))
            options = itertools.product(*[range(counts[k] + 1) for k in ks]) if full else [tuple(0 for _ in ks)]
            best_r = None
            for combo in options:
                rcs = list(chosen_rc)
                for k, v in zip(ks, combo, strict=True):
                    rcs[k] = v
                rc = rank_cost(p.table, slices_from_counts(counts, rcs), r, pp, p.recompute, p.schedule,
                               p.num_micro_batches, p.vpp, p.reserved_bytes, p.interference)
                if rc.peak_bytes > p.capacity_bytes:
                    continue
                key = (rc.time_s, rc.exposed_dp_s + rc.optimizer_s)
                if best_r is None or key < best_r[0]:
                    best_r = (key, combo, rc)
            if best_r is None:
                ok = False
                break
            for k, v in zip(ks, best_r[1], strict=True):
                chosen_rc[k] = v
            ranks.append(best_r[2])
        if not ok:
            continue
        t = step_time_s(ranks, p.num_micro_batches, p.vpp)
        if best is None or t < best[0] - 1e-15:
            best = (t, list(counts), list(chosen_rc))
    return best


def check_size(L: int, S: int, full: bool, candidates: int) -> None:
    work = count_work(L, S, full) * max(1, candidates)
    if work > MAX_EVALUATIONS:
        raise SpecError(
            "search",
            f"--exhaustive would evaluate about {work:,} partitions (limit {MAX_EVALUATIONS:,}); "
            "pin some knobs (search.pp, search.tp, ...) or use the ILP planner",
            allowed=f"<= {MAX_EVALUATIONS:,} evaluations",
        )
