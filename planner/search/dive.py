"""Dives: now and then the best-first loop records a greedy plan of one of the least-bound
queued candidates, a plan to prune against where best-first order alone would refine
candidates whose bounds sit below the optimum for the whole limit (a large MoE space). A
dived candidate stays queued for its exact solve."""

from __future__ import annotations

import heapq
import math
import time

from cost_model.specs.vocab import STATUS_FEASIBLE
from cost_model.terms import memory
from planner.search.context import Context
from planner.search.queue import Entry, Frontier, Order
from planner.search.tables import stage_problem


class Dives:
    """When to dive (policy.dive_*) and which pool entries were priced by a dive (`dived`)."""

    def __init__(self, ctx: Context, frontier: Frontier):
        self.ctx, self.frontier = ctx, frontier
        self.dived: set[Order] = set()
        self.last = -math.inf  # when the last dive began
        self.time_s = 0.0  # time the dives took

    def due(self, now: float) -> bool:
        """After policy.dive_after_share of the limit: at once while no plan is found, then
        once every policy.dive_every_share of the limit while the least queued bound is below
        the best plan and the dives have taken less than policy.dive_time_share of the time."""
        ctx, pool = self.ctx, self.frontier.pool
        policy, t0, limit = ctx.policy, ctx.clock.t0, ctx.clock.limit
        if not pool or now - t0 < policy.dive_after_share * limit:
            return False
        if not ctx.best.found:
            return True
        return (now - self.last >= policy.dive_every_share * limit and pool[0].bound_s < ctx.best.best_s() * ctx.caps.keep
                and self.time_s < policy.dive_time_share * (now - t0))

    def run(self, now: float) -> None:
        """Dive, and count its time from `now` (when `due` was asked)."""
        self.dive()
        self.time_s += time.perf_counter() - now

    def dive(self) -> None:
        """Record a greedy plan: of the policy.dive_pool least-bound candidates, the one whose
        own table's cheap bound is least and that has a partition that fits; the others go back
        to the pool with that bound."""
        ctx, pool = self.ctx, self.frontier.pool
        prob, tables = ctx.prob, ctx.tables
        B = prob.training.global_batch_size
        self.last = time.perf_counter()
        picks: list[Entry] = []
        while pool and len(picks) < ctx.policy.dive_pool:
            ctx.deadline.check("a dive")
            e = heapq.heappop(pool)
            if e.order in self.dived:
                continue
            c = e.candidate
            self.dived.add(e.order)
            own = self.frontier.own_cheap_bound(c, tables.get(c), B // (c.dp * c.micro_batch_size),
                                                memory.reserved_bytes(c, prob.model, prob.training))
            if own is not None:
                picks.append(e._replace(bound_s=max(e.bound_s, own)))
        picks.sort()
        for i, e in enumerate(picks):
            ctx.deadline.check("a dive")
            table = tables.get(e.candidate)
            hint = ctx.seams.best_hint(stage_problem(prob, e.candidate, table), ctx.deadline)
            if hint is not None:
                ctx.stats.dives += 1
                ctx.best.record(e.candidate, table, hint[0], hint[1], STATUS_FEASIBLE, e.bound_s)
                for x in picks[i + 1:]:
                    self.dived.discard(x.order)
                    heapq.heappush(pool, x)
                return
