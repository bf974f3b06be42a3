"""The search: enumerate candidates (space.py), order them by an optimistic time bound,
prune by memory and time bounds (bounds.py) against the best plan so far, and solve the stage
partition of each survivor exactly (ilp.py; greedy.py as hint and fallback; exhaustive.py
for the reference search)."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from cost_model.estimate import compose
from cost_model.layers import LayerTable, layer_table
from cost_model.results import GIB, Estimate
from cost_model.specs import (
    CalibrationProfile,
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
)
from cost_model.stages import slices_from_counts

from . import exhaustive as brute
from .bounds import (
    TableSums,
    base_memory_bound_bytes,
    base_time_bound_s,
    cheap_time_bound_s,
    memory_bound_bytes,
    table_sums,
    tight_time_bound_s,
)
from .greedy import greedy_partition
from .ilp import StageProblem, capacity_bytes, solve
from .space import Candidate, SearchSpace, enumerate_candidates


@dataclass
class Found:
    candidate: Candidate
    config: ParallelConfig
    estimate: Estimate
    status: str  # optimal | feasible (of the stage ILP)


@dataclass
class SearchStats:
    candidates: int = 0
    pruned_memory: int = 0
    pruned_time: int = 0
    ilp_solves: int = 0
    infeasible: int = 0
    solve_time_s: float = 0.0
    timed_out: bool = False
    lower_bound_s: float = math.inf  # least bound over what was not proven
    min_memory_gib: float = math.inf  # least memory lower bound seen, for infeasibility reports
    min_memory_config: Candidate | None = None
    solver: str = "cp-sat"

    def note_memory(self, gib: float, c: Candidate) -> None:
        """Keep the least memory bound seen (for the infeasibility report)."""
        if gib < self.min_memory_gib:
            self.min_memory_gib, self.min_memory_config = gib, c


@dataclass
class SearchResult:
    best: list[Found]
    stats: SearchStats
    status: str  # optimal | feasible
    gap: float


@dataclass(frozen=True)
class Problem:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    space: SearchSpace
    profile: CalibrationProfile | None = None


def _to_config(c: Candidate, counts=None, rcs=None) -> ParallelConfig:
    return ParallelConfig(
        dp=c.dp, tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, vpp=c.vpp, sequence_parallel=c.sequence_parallel,
        zero=c.zero, micro_batch_size=c.micro_batch_size, recompute=c.recompute,
        recompute_layers=tuple(rcs) if rcs is not None and c.recompute == "full" else None,
        schedule=c.schedule, stage_layers=tuple(counts) if counts is not None else None,
    )


class _Tables:
    """Per-layer cost tables, built on demand: the full table per (dp, tp, cp, ep, sp, zero,
    mb), and a base table per (tp, cp, ep, sp, mb) with no data parallelism and no ZeRO,
    whose totals bound every (dp, zero) variant from below (bounds.base_bounds)."""

    def __init__(self, prob: Problem):
        self.prob = prob
        self.cache: dict[tuple, LayerTable] = {}
        self.sums: dict[tuple, TableSums] = {}

    def _build(self, key: tuple, cfg: ParallelConfig) -> LayerTable:
        if key not in self.cache:
            self.cache[key] = layer_table(self.prob.model, self.prob.cluster, self.prob.training, cfg, self.prob.profile)
        return self.cache[key]

    def _sums(self, key: tuple, table: LayerTable) -> TableSums:
        if key not in self.sums:
            self.sums[key] = table_sums(table, self.prob.cluster.gpu.overlap_interference)
        return self.sums[key]

    def get(self, c: Candidate) -> LayerTable:
        return self._build(c.table_key, _to_config(c))

    def get_sums(self, c: Candidate) -> TableSums:
        return self._sums(c.table_key, self.get(c))

    def base(self, c: Candidate) -> tuple[LayerTable, TableSums]:
        key = ("base", c.tp, c.cp, c.ep, c.sequence_parallel, c.micro_batch_size)
        cfg = ParallelConfig(dp=1, tp=c.tp, cp=c.cp, ep=c.ep, sequence_parallel=c.sequence_parallel, micro_batch_size=c.micro_batch_size)
        table = self._build(key, cfg)
        return table, self._sums(key, table)


def stage_problem(prob: Problem, c: Candidate, table: LayerTable) -> StageProblem:
    gpu = prob.cluster.gpu
    return StageProblem(
        table=table,
        pp=c.pp,
        vpp=c.vpp,
        schedule=c.schedule,
        recompute=c.recompute,
        num_micro_batches=prob.training.global_batch_size // (c.dp * c.micro_batch_size),
        capacity_bytes=capacity_bytes(prob.cluster.gpu.memory_gib, prob.space.memory_headroom),
        reserved_bytes=gpu.reserved_gib * GIB,
        interference=gpu.overlap_interference,
    )


def _record(found: list[Found], prob: Problem, c: Candidate, table: LayerTable, counts, rcs, status: str, k: int) -> None:
    """Cost the partition with the float model and keep the k best distinct plans."""
    c = _normalise(c, table, rcs)
    if any(f.candidate == c for f in found):
        return  # the same plan reached through an equivalent recompute setting
    cfg = _to_config(c, counts, rcs)
    est = compose(prob.model, prob.cluster, prob.training, cfg, table, slices_from_counts(counts, cfg.recompute_layers))
    found.append(Found(c, cfg, est, status))
    found.sort(key=lambda f: (f.estimate.prediction.step_time_s, _tiebreak(f.candidate)))
    del found[k:]


def search_exhaustive(prob: Problem) -> SearchResult:
    """Reference: every candidate, every partition (exhaustive.py); no bounds, no pruning."""
    stats = SearchStats(solver="exhaustive")
    tables = _Tables(prob)
    cands = list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile,
                                      dominance=False))
    brute.check_size(prob.model.num_layers, max((c.pp * c.vpp for c in cands), default=1), True, len(cands))
    found: list[Found] = []
    for c in cands:
        stats.candidates += 1
        table = tables.get(c)
        res = brute.best_partition(stage_problem(prob, c, table))
        if res is None:
            stats.infeasible += 1
            continue
        _record(found, prob, c, table, res[1], res[2], "optimal", prob.space.top_k)
    if not found:
        _least_memory(prob, tables, cands, stats)
    return SearchResult(found, stats, "optimal", 0.0)


def _least_memory(prob: Problem, tables: _Tables, cands, stats: SearchStats) -> None:
    reserved = prob.cluster.gpu.reserved_gib * GIB
    for c in cands:
        m = prob.training.global_batch_size // (c.dp * c.micro_batch_size)
        mem = memory_bound_bytes(tables.get_sums(c), c.recompute, c.schedule, c.pp, c.vpp, m, reserved) / GIB
        stats.note_memory(mem, c)


# A progress sink: called with one human-readable line now and then during a long search.
Progress = Callable[[str], None]


def search(
    prob: Problem,
    exhaustive: bool = False,
    deadline_s: float | None = None,
    progress: Progress | None = None,
) -> SearchResult:
    if exhaustive:
        return search_exhaustive(prob)
    t0 = time.perf_counter()
    limit = prob.space.time_limit_s if deadline_s is None else deadline_s
    stats = SearchStats()
    tables = _Tables(prob)
    gpu = prob.cluster.gpu
    reserved = gpu.reserved_gib * GIB
    cap = capacity_bytes(gpu.memory_gib, prob.space.memory_headroom)
    k = prob.space.top_k
    B = prob.training.global_batch_size

    # --- enumerate; order by the base-table bound (level 0)
    queue: list[tuple[float, int, int, Candidate]] = []  # (bound, order, level, candidate)
    for i, c in enumerate(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile)):
        stats.candidates += 1
        m = B // (c.dp * c.micro_batch_size)
        base_table, base_sums = tables.base(c)
        mem_lb = base_memory_bound_bytes(base_sums, prob.training, c, m, reserved)
        stats.note_memory(mem_lb / GIB, c)
        if mem_lb > cap:
            stats.pruned_memory += 1
            continue
        queue.append((base_time_bound_s(base_sums, base_table, c, m), i, 0, c))
    heapq.heapify(queue)

    # --- best-first: refine the bound of what reaches the front (level 1: the candidate's own
    # table, and for uniform blocks the tight bound), solve it when it is still in front
    found: list[Found] = []
    optimal_all = True
    while queue:
        lb, order, level, c = queue[0]
        # prune against the best plan: alternatives are the runners-up among what was solved
        best_t = found[0].estimate.prediction.step_time_s if found else math.inf
        if lb >= best_t * (1 - 1e-9):
            stats.pruned_time += len(queue)
            break
        out_of_time = time.perf_counter() - t0 > limit
        if out_of_time and found:
            stats.timed_out = True
            stats.lower_bound_s = min(stats.lower_bound_s, lb)
            break
        heapq.heappop(queue)
        table = tables.get(c)
        p = stage_problem(prob, c, table)
        if out_of_time:
            # nothing found yet: take the best-bounded candidates' greedy partitions until one fits
            stats.timed_out = True
            stats.lower_bound_s = min(stats.lower_bound_s, lb)
            hint = greedy_partition(p)
            if hint is not None:
                _record(found, prob, c, table, hint[0], hint[1], "feasible", k)
                optimal_all = False
            continue
        if level == 0:
            sums = tables.get_sums(c)
            m = p.num_micro_batches
            if memory_bound_bytes(sums, c.recompute, c.schedule, c.pp, c.vpp, m, reserved) > cap:
                stats.pruned_memory += 1
                continue
            refined = cheap_time_bound_s(sums, table, c.recompute, c.pp, c.vpp, m)
            if refined < best_t:
                refined = max(refined, tight_time_bound_s(p, sums, cutoff=best_t))
            if refined == math.inf:
                stats.pruned_memory += 1
                continue
            heapq.heappush(queue, (max(lb, refined), order, 1, c))
            continue
        hint = greedy_partition(p)
        remaining = max(0.05, limit - (time.perf_counter() - t0))
        sol = solve(p, min(remaining, max(1.0, limit / 4)), hint, lower_bound_s=lb)
        stats.ilp_solves += 1
        stats.solve_time_s += sol.solve_time_s
        if sol.status in ("optimal", "feasible"):
            counts, rcs, status = list(sol.stage_layers), list(sol.recompute_layers), sol.status
            if status == "feasible":
                optimal_all = False
                stats.lower_bound_s = min(stats.lower_bound_s, sol.bound_s)
        elif hint is not None:
            counts, rcs, status = hint[0], hint[1], "feasible"
            optimal_all = False
        else:
            if sol.status == "unknown":
                optimal_all = False
                stats.lower_bound_s = min(stats.lower_bound_s, lb)
            stats.infeasible += 1
            continue
        _record(found, prob, c, table, counts, rcs, status, k)

    best_t = found[0].estimate.prediction.step_time_s if found else math.inf
    status = "optimal" if found and optimal_all and not stats.timed_out else "feasible"
    gap = 0.0
    if found and status == "feasible" and math.isfinite(stats.lower_bound_s):
        gap = max(0.0, (best_t - min(stats.lower_bound_s, best_t)) / best_t)
    return SearchResult(found, stats, status, gap)


def _normalise(c: Candidate, table: LayerTable, rcs) -> Candidate:
    """Full recompute of zero blocks, or selective recompute that saves and costs nothing
    (flash attention), is the plan without recompute."""
    from dataclasses import replace

    if c.recompute == "full" and not any(rcs):
        return replace(c, recompute="none")
    if c.recompute == "selective" and all(b.recompute_selective_s == 0 and b.act.selective == b.act.none for b in table.blocks):
        return replace(c, recompute="none")
    return c


def _tiebreak(c: Candidate) -> tuple:
    """Among equal times prefer simpler plans: less model parallelism, less sharding."""
    return (c.pp * c.vpp, c.tp, c.cp, c.ep, c.zero, c.recompute != "none", c.micro_batch_size)
