"""The best plans found so far: each partition a search settles on is priced with the float
model and kept when it is among the k best distinct plans.

Distinct: two plans are one line when they share their degrees, micro-batch, sharding,
recompute and schedule (`distinct_key`); variants of one such configuration (its vpp, sequence
parallelism, context-parallel communication, MoE dispatcher or overlap) are near-copies, and
only the fastest is kept. The search prunes against the k-th kept plan (`prune_s`), not the
best, so the alternatives are the true runners-up: a candidate that cannot beat the k-th can
change no line of the k."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from cost_model.engines.support import get_engine
from cost_model.estimate import compose
from cost_model.pipeline.rank_costs import engine_recompute_counts
from cost_model.pipeline.stages import slices_from_counts
from cost_model.specs.vocab import (
    DISPATCHER_ALLTOALL,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    STATUS_OPTIMAL,
    ActivationOffload,
    values,
)
from cost_model.terms.layers import LayerTable
from planner.search.results import Found, Problem
from planner.search.tables import to_config
from planner.space import Candidate

# the activation offload levels in the vocabulary order: fewer modules offloaded first (tiebreak)
ACT_OFFLOAD_LEVELS = values(ActivationOffload)


class Incumbent:
    """The k best distinct plans found so far, best first (`found`)."""

    def __init__(self, prob: Problem, k: int):
        self.prob, self.k = prob, k
        self.found: list[Found] = []
        # False while the search proves the best plan (it prunes against the best); True once
        # it searches for the runners-up (against the k-th): BestFirstSearch._runners_up
        self.widen = False
        # called (no arguments) each time the best plan changes: BestFirstSearch publishes its
        # best plan so far from here (planner/publish.py)
        self.on_best: Callable[[], None] | None = None

    def best_s(self) -> float:
        """The best plan's step time; math.inf while none is found."""
        return self.found[0].estimate.prediction.step_time_s if self.found else math.inf

    def kth_s(self) -> float:
        """The k-th kept plan's step time; math.inf while fewer than k are kept."""
        return self.found[self.k - 1].estimate.prediction.step_time_s if len(self.found) >= self.k else math.inf

    def prune_s(self) -> float:
        """The step time a candidate must beat to matter now: the best plan's while the search
        proves it, the k-th's once it searches for the runners-up (`widen`)."""
        return self.kth_s() if self.widen else self.best_s()

    def can_change(self, c: Candidate, bound_s: float, widened: bool = False) -> bool:
        """Whether a candidate no faster than `bound_s` could matter now (`widened`: once the
        search looks for the runners-up): it must beat prune_s (the k-th's where widened), and
        where its line (distinct_key) is kept already, that line's plan."""
        if bound_s >= (self.kth_s() if widened else self.prune_s()):
            return False
        key = distinct_key(c)
        return not any(distinct_key(f.candidate) == key and f.estimate.prediction.step_time_s <= bound_s
                       for f in self.found)

    def own(self, c: Candidate) -> Found | None:
        """The plan kept for candidate `c`, if any."""
        return next((f for f in self.found if f.candidate == c), None)

    def record(self, c: Candidate, table: LayerTable, counts, rcs, status: str, bound_s: float = 0.0) -> None:
        """Cost the partition with the float model and keep the k best distinct plans;
        `bound_s`: the candidate's lower bound where known (an optimal partition's is its time)."""
        prob, found = self.prob, self.found
        e = get_engine(c.engine)
        if c.recompute == RECOMPUTE_FULL:
            # a fallback partition (greedy) may have per-stage counts the engine cannot take:
            # price the counts it would run (launch/megatron.py recompute, torchtitan's full AC)
            rcs = engine_recompute_counts(counts, rcs, e.one_recompute_count, e.recomputes_every_block)
        c = normalise(c, table, rcs)
        cfg = to_config(c, counts, rcs)
        est = compose(prob.model, prob.cluster, prob.training, cfg, table, slices_from_counts(counts, cfg.recompute_layers))
        mem = est.prediction.memory
        if mem.host_gib > mem.host_capacity_gib * (1 - prob.space.memory_headroom):
            return  # its offloaded states do not fit the nodes' host memory (the stage ILP does not see it)
        key = distinct_key(c)
        same = [f for f in found if distinct_key(f.candidate) == key]
        if same and same[0].estimate.prediction.step_time_s <= est.prediction.step_time_s:
            return  # the same line reached through a near-copy or an equivalent setting, or a retry found no better
        for f in same:  # a faster near-copy, or a retry that improved on it
            found.remove(f)
        t = est.prediction.step_time_s
        before = found[0] if found else None
        found.append(Found(c, cfg, est, status, t if status == STATUS_OPTIMAL else min(bound_s, t)))
        found.sort(key=lambda f: (f.estimate.prediction.step_time_s, tiebreak(f.candidate)))
        del found[self.k:]
        if found[0] is not before and self.on_best is not None:
            self.on_best()


def normalise(c: Candidate, table: LayerTable, rcs) -> Candidate:
    """Full recompute of zero blocks, or selective recompute that saves and costs nothing
    (flash attention), is the plan without recompute."""
    if c.recompute == RECOMPUTE_FULL and not any(rcs):
        return replace(c, recompute=RECOMPUTE_NONE)
    if c.recompute == RECOMPUTE_SELECTIVE and all(b.recompute_selective_s == 0 and b.act.selective == b.act.none for b in table.blocks):
        return replace(c, recompute=RECOMPUTE_NONE)
    return c


def distinct_key(c: Candidate) -> tuple:
    """What makes two plans different lines of the top-k: degrees, micro-batch, sharding,
    recompute and schedule kind. vpp, sequence parallelism, the context-parallel
    communication, the MoE dispatcher and overlap are variants of one line."""
    return (c.dp, c.tp, c.pp, c.cp, c.ep, c.etp, c.micro_batch_size, c.zero, c.dp_replicate, c.recompute, c.schedule,
            c.engine, c.optimizer_offload, c.activation_offload)


def tiebreak(c: Candidate) -> tuple:
    """Among equal times prefer simpler plans: less model parallelism, less sharding."""
    return (c.pp * c.vpp, c.tp, c.cp, c.ep, c.zero, c.dp_replicate > 1, c.recompute != RECOMPUTE_NONE, c.micro_batch_size,
            c.moe_a2a_overlap, get_engine(c.engine).cp_variants.index(c.cp_comm) if c.cp_comm else 0,
            c.moe_dispatcher != DISPATCHER_ALLTOALL, c.optimizer_offload,
            ACT_OFFLOAD_LEVELS.index(c.activation_offload))  # the fewer modules offloaded, the less host traffic
