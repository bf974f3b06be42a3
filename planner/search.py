"""The search: enumerate candidates (space.py), order them by an optimistic time bound,
prune by memory and time bounds against the k-th best plan so far, and solve the stage
partition of each survivor exactly (ilp.py; greedy.py as hint and fallback; exhaustive.py
for the reference search)."""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

from cost_model import memory
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
from .greedy import greedy_partition
from .ilp import StageProblem, block_time_s, capacity_bytes, solve
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


@dataclass
class SearchResult:
    best: list[Found]
    stats: SearchStats
    status: str  # optimal | feasible
    gap: float
    bound_notes: list[str] = field(default_factory=list)


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
    """Per-layer cost tables, one per (dp, tp, cp, ep, sp, zero, mb), built on demand."""

    def __init__(self, prob: Problem):
        self.prob = prob
        self.cache: dict[tuple, LayerTable] = {}
        self.sums: dict[tuple, TableSums] = {}

    def get(self, c: Candidate) -> LayerTable:
        key = c.table_key
        if key not in self.cache:
            self.cache[key] = layer_table(self.prob.model, self.prob.cluster, self.prob.training, _to_config(c), self.prob.profile)
        return self.cache[key]

    def get_sums(self, c: Candidate) -> TableSums:
        key = c.table_key
        if key not in self.sums:
            self.sums[key] = table_sums(self.get(c), self.prob.cluster.gpu.overlap_interference)
        return self.sums[key]


@dataclass(frozen=True)
class TableSums:
    """Whole-model totals of a layer table, computed once per table for the bounds."""

    time_s: dict[str, float]  # by recompute mode: blocks + embedding + output, no full recompute
    tail_s: float  # sum of g*dp_sync + optimizer over all layers
    states_bytes: float
    act_bytes: dict[str, float]  # by recompute mode: the least activation bytes of all blocks


def table_sums(table: LayerTable, gamma: float) -> TableSums:
    layers = (*table.blocks, table.embedding, table.output)
    extras = table.embedding.time_s + table.output.time_s
    return TableSums(
        time_s={r: sum(block_time_s(b, r) for b in table.blocks) + extras for r in ("none", "selective", "full")},
        tail_s=sum(gamma * x.dp_sync_s + x.optimizer_s for x in layers),
        states_bytes=sum(x.state_bytes for x in layers),
        act_bytes={
            "none": sum(b.act.none for b in table.blocks),
            "selective": sum(b.act.selective for b in table.blocks),
            "full": sum(b.act.full for b in table.blocks),
        },
    )


def time_lower_bound_s(sums: TableSums, table: LayerTable, c: Candidate, m: int) -> float:
    """Optimistic step time: with W the summed per-micro-batch time of all layers (no full
    recompute), max_r T_r >= W/p and sum_r T_r = W + p2p, so T_pipe >= (m - 1/v) W/p + W/v;
    the tail is at least the mean over ranks of g*dp + optimizer."""
    W = sums.time_s[c.recompute] + 2 * (c.pp * c.vpp - 1) * table.p2p_s
    return (m - 1.0 / c.vpp) * W / c.pp + W / c.vpp + sums.tail_s / c.pp


def memory_lower_bound_bytes(sums: TableSums, c: Candidate, m: int, reserved: float) -> float:
    """Some rank holds at least 1/p of the model states and, being the last rank, at least
    one micro-batch of 1/p of the blocks' least activations (block inputs under full recompute)."""
    act = sums.act_bytes[c.recompute] / c.pp * memory.in_flight_micro_batches(c.schedule, c.pp, c.pp - 1, m, c.vpp)
    return (1 + memory.ALLOCATOR_FRAGMENTATION) * (sums.states_bytes / c.pp + act) + reserved


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


def search(prob: Problem, exhaustive: bool = False, deadline_s: float | None = None) -> SearchResult:
    t0 = time.perf_counter()
    limit = prob.space.time_limit_s if deadline_s is None else deadline_s
    stats = SearchStats(solver="exhaustive" if exhaustive else "cp-sat")
    tables = _Tables(prob)
    gpu = prob.cluster.gpu
    reserved = gpu.reserved_gib * GIB
    cap = capacity_bytes(gpu.memory_gib, prob.space.memory_headroom)
    k = prob.space.top_k

    # --- enumerate and bound every candidate
    queue: list[tuple[float, int, Candidate]] = []
    for i, c in enumerate(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space)):
        stats.candidates += 1
        table, sums = tables.get(c), tables.get_sums(c)
        m = prob.training.global_batch_size // (c.dp * c.micro_batch_size)
        mem_lb = memory_lower_bound_bytes(sums, c, m, reserved)
        if mem_lb / GIB < stats.min_memory_gib:
            stats.min_memory_gib, stats.min_memory_config = mem_lb / GIB, c
        if mem_lb > cap:
            stats.pruned_memory += 1
            continue
        queue.append((time_lower_bound_s(sums, table, c, m), i, c))
    heapq.heapify(queue)
    if exhaustive:
        brute.check_size(prob.model.num_layers, max((c.pp * c.vpp for _, _, c in queue), default=1), True, 1)

    # --- best-first: solve while the bound can still beat the k-th best
    found: list[Found] = []
    optimal_all = True
    while queue:
        lb, _, c = queue[0]
        # prune against the best plan: alternatives are the runners-up among what was solved
        best_t = found[0].estimate.prediction.step_time_s if found else math.inf
        if lb >= best_t * (1 - 1e-9):
            stats.pruned_time += len(queue)
            break
        if time.perf_counter() - t0 > limit:
            stats.timed_out = True
            stats.lower_bound_s = min(stats.lower_bound_s, lb)
            break
        heapq.heappop(queue)
        table = tables.get(c)
        p = stage_problem(prob, c, table)
        if exhaustive:
            res = brute.best_partition(p)
            if res is None:
                stats.infeasible += 1
                continue
            counts, rcs, status = res[1], res[2], "optimal"
        else:
            hint = greedy_partition(p)
            remaining = max(0.05, limit - (time.perf_counter() - t0))
            sol = solve(p, min(remaining, max(1.0, limit / 4)), hint)
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
        c = _normalise(c, table, rcs)
        if any(f.candidate == c for f in found):
            continue  # the same plan reached through an equivalent recompute setting
        cfg = _to_config(c, counts, rcs)
        est = compose(prob.model, prob.cluster, prob.training, cfg, table, slices_from_counts(counts, cfg.recompute_layers))
        found.append(Found(c, cfg, est, status))
        found.sort(key=lambda f: (f.estimate.prediction.step_time_s, _tiebreak(f.candidate)))
        del found[k:]

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
