"""The best-first search as an object: its state in named parts (the queue, the solves and
what they left open, the solve scheduler, the dives) and its loop in methods."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import replace

from cost_model.specs.vocab import STATUS_FEASIBLE, STATUS_OPTIMAL
from planner.deadline import Deadline, DeadlineExceeded
from planner.search.context import Caps, Clock, Context
from planner.search.dive import Dives
from planner.search.incumbent import Incumbent
from planner.search.policy import SearchPolicy
from planner.search.queue import Entry, Frontier
from planner.search.results import Problem, Progress, Reporter, SearchResult, SearchStats
from planner.search.scheduler import SolveScheduler
from planner.search.seams import Seams
from planner.search.solves import Job, Solves
from planner.search.tables import LayerTables, stage_problem


class BestFirstSearch:
    """Best-first over degree groups and candidates: each group is queued with its group
    bound; at the front it is expanded into its candidates, each queued with its base-table
    bound; a candidate at the front is refined (its own table, the tight bound) and queued
    again; at the front once refined it is solved on a CP-SAT thread while this thread goes
    on (when its hint is within policy.defer_rel of its bound and a solve slot is free;
    otherwise the hint is recorded and the solve deferred until the queue is done, then capped
    at the best plan: Solves.prepare). Stops when the front's bound reaches the best plan
    (everything left is pruned by a bound >= the best: OPTIMAL if every solve was optimal), or
    at the deadline (FEASIBLE; the gap from the least bound left open). Below
    policy.staged_gap this runs twice: first as a search at staged_gap, then at the gap asked
    for, from the queue and the open candidates the first left. A solve capped at a plan the
    best plan has since beaten is stopped and solved again at the new cap
    (SolveScheduler.preempt).

    Its parts: `ctx` (what they all read: problem, policy, seams, clock, counters, tables, the
    best plans, the phase's caps), `frontier` (the queue), `solves` (one candidate's solve, and
    the candidates left open), `scheduler` (the solve threads and the retries), `dives`."""

    def __init__(self, prob: Problem, deadline_s: float | None = None, progress: Progress | None = None, *,
                 progress_after_s: float | None = None, progress_every_s: float | None = None,
                 policy: SearchPolicy = SearchPolicy(), seams: Seams = Seams(),
                 publish: Callable[[SearchResult], None] | None = None):
        t0 = time.perf_counter()
        limit = prob.space.time_limit_s if deadline_s is None else deadline_s
        self.ctx = ctx = Context(prob, policy, seams, Clock(t0, limit), SearchStats(), LayerTables(prob),
                                 Incumbent(prob, prob.space.top_k), Caps(prob.space.gap_limit, policy),
                                 Deadline(t0 + limit + policy.deadline_grace_s(limit)))
        self.progress = progress
        self.report = Reporter(progress, t0, policy.progress_after_s if progress_after_s is None else progress_after_s,
                               policy.progress_every_s if progress_every_s is None else progress_every_s)
        self.frontier = Frontier(ctx)
        self.solves = Solves(ctx)
        self.scheduler = SolveScheduler(ctx, self.solves)
        self.dives = Dives(ctx, self.frontier)
        self.optimal_all = True  # no plan was recorded past the deadline (the rescue)
        self.in_hand_s = math.inf  # the bound of the entry popped and being worked on
        if publish is not None:  # each new best plan, as the search stands then (snapshot)
            ctx.best.on_best = lambda: publish(self.snapshot())

    def run(self) -> SearchResult:
        ctx, solves = self.ctx, self.solves
        caps = ctx.caps
        with self.scheduler:
            try:
                self.frontier.bound_groups()
                for phase, gap in enumerate(caps.phase_gaps):
                    if phase:
                        # the next phase (policy.staged_gap): its keep and cap, and a retry of every
                        # candidate the last one left open below the best plan (set aside by the
                        # bounds or its hint within the last gap, or cut off by the last cap)
                        caps.enter(gap)
                        solves.retry.update(key for key, (b, _) in solves.open.items()
                                            if b < ctx.best.best_s() * caps.keep)
                    self._best_first(last_phase=phase == len(caps.phase_gaps) - 1)
                    self._retries()
                    if ctx.stats.timed_out:
                        break
            except DeadlineExceeded:
                self._hard_stop()
            self.scheduler.drain()
            result = self._result()  # the best plan's status and gap, before the runners-up
            try:
                self._runners_up()
            except DeadlineExceeded:
                pass  # the runners-up are extra lines: the best plan and its gap stand
        self._stop_clock()
        return replace(result, best=list(ctx.best.found))

    def _hard_stop(self) -> None:
        """Past the hard deadline (a loop over blocks or candidates raised it): timed out, the
        gap from the least bound still queued or in hand (the rescue's queue is keyed by fit,
        its least bound kept when it began). What the search has recorded is its answer."""
        stats, queue = self.ctx.stats, self.frontier.queue
        stats.timed_out = True
        self.optimal_all = False
        if not self.frontier.rescue:
            stats.lower_bound_s = min([stats.lower_bound_s, self.in_hand_s] + [queue[0].bound_s] * bool(queue))

    def snapshot(self) -> SearchResult:
        """The search as it stands, as if it stopped now: its plans so far (FEASIBLE, timed
        out) and their gap from the least bound of everything not yet proven: the queue's
        front (the least bound kept when the rescue began, where it re-keyed the queue), the
        entry in hand, the candidates left open or being solved, the bounds set aside, and
        the kept plans' own bounds; no gap is claimed (lower bound 0) where a table broke the
        group bounds' monotonicity. Copies: the search goes on changing its own."""
        ctx, frontier, solves = self.ctx, self.frontier, self.solves
        stats, found = ctx.stats, list(ctx.best.found)
        bounds = [stats.lower_bound_s, self.in_hand_s, frontier.aside]
        if frontier.queue and not frontier.rescue:
            bounds.append(frontier.queue[0].bound_s)
        bounds += [b for b, _ in solves.open.values()]
        bounds += [job.entry.bound_s for job in self.scheduler.flying.values()]
        bounds += [f.bound_s for f in found]
        lower_s = min(bounds) if frontier.monotone_ok else 0.0
        elapsed = ctx.clock.elapsed()
        now = replace(stats, timed_out=True, solve_time_s=elapsed, lower_bound_s=lower_s,
                      monotone_ok=frontier.monotone_ok)
        gap = 0.0
        if found:
            best_t = found[0].estimate.prediction.step_time_s
            gap = max(0.0, (best_t - min(lower_s, best_t)) / best_t)
        return SearchResult(found, now, STATUS_FEASIBLE, gap)

    def _stop_clock(self) -> None:
        """The whole search's wall time, runners-up and the solves drained at the end included;
        `timed_out` also where it ran past its limit without stopping for it (a solve or the
        bounding of the first groups outlasting the limit): a search that took 18 s of 10 did
        run out of time, whatever it proved."""
        stats, clock = self.ctx.stats, self.ctx.clock
        stats.solve_time_s = clock.elapsed()
        stats.timed_out = stats.timed_out or stats.solve_time_s > clock.limit

    def _runners_up(self) -> None:
        """The top-k's other lines, once the best plan is proven, for at most
        policy.runner_up_share of the time so far (runner_up_min_s at least), within the
        limit: the queue searched on down to the k-th plan (the candidates that could not beat
        the best, set aside by expand, queued again), each line kept from its hint, then those
        hints solved at the k-th plan's cap, cheapest bound first. What the time leaves
        unproven states its gap. The best plan's status, gap and counters are not touched."""
        ctx, best, stats = self.ctx, self.ctx.best, self.ctx.stats
        if best.k < 2 or not best.found or stats.timed_out:
            return
        elapsed, limit = ctx.clock.elapsed(), ctx.clock.limit
        end_s = min(limit, elapsed + max(ctx.policy.runner_up_min_s, elapsed * ctx.policy.runner_up_share))
        kept = (stats.timed_out, stats.lower_bound_s, self.frontier.aside)
        best.widen = True
        ctx.clock.limit = end_s
        try:
            self.frontier.widen()
            self._best_first(last_phase=True)
            self.scheduler.drain()
            self._solve_runners_up(end_s)
        finally:
            ctx.clock.limit = limit
            stats.timed_out, stats.lower_bound_s, self.frontier.aside = kept

    def _solve_runners_up(self, end_s: float) -> None:
        """The runners-up kept from a hint (or cut off at the best plan's cap), solved at the
        k-th plan's cap, cheapest bound first, until `end_s`."""
        ctx, solves, best = self.ctx, self.solves, self.ctx.best
        done: set = set()
        while True:
            todo = sorted((b, e.order, e) for order, (b, e) in solves.runners_up.items()
                          if order not in done and best.can_change(e.candidate, b / ctx.caps.final_keep))
            left_s = end_s - ctx.clock.elapsed()
            if not todo or left_s < ctx.policy.min_solve_s:
                return
            bound, order, e = todo[0]
            done.add(order)
            table = ctx.tables.get(e.candidate)
            p = stage_problem(ctx.prob, e.candidate, table)
            mine = best.own(e.candidate)
            hint = ((list(mine.config.stage_layers), list(mine.config.recompute_layers or [0] * len(mine.config.stage_layers)))
                    if mine is not None else ctx.seams.best_hint(p, ctx.deadline))
            cap = best.prune_s()
            share = ctx.caps.final_stop_share
            job = Job(e, p, table, hint, cap * share if math.isfinite(cap) else None, cap_share=share)
            self.scheduler.solve_now(job, min(left_s, solves.first_solve_s))

    def _line(self) -> str:
        """The progress line."""
        ctx, queued = self.ctx, self.frontier.queued
        stats = ctx.stats
        best = f"{ctx.best.best_s():.4g} s" if ctx.best.found else "none yet"
        return (f"search: {stats.candidates - queued:,} of {stats.candidates:,} candidates examined, {queued:,} left, "
                f"{stats.groups - stats.groups_expanded:,} of {stats.groups:,} degree groups unexpanded, "
                f"{stats.ilp_solves} solved, best step {best}, {ctx.clock.elapsed():.1f} s elapsed")

    def _best_first(self, last_phase: bool) -> None:
        """The queue, front first, until its front's bound reaches the phase's keep x the best
        plan (the last phase: what is left is pruned) or the deadline."""
        ctx, frontier, scheduler = self.ctx, self.frontier, self.scheduler
        stats, best, queue = ctx.stats, ctx.best, frontier.queue
        while queue:
            scheduler.harvest(block=False)
            if self.solves.retry and not scheduler.loop_busy():
                scheduler.start_retry(scheduler.loop_workers, early=True)
            if self.progress is not None:
                self.report(self._line)
            ctx.deadline.check("the best-first loop")
            e = queue[0]
            # prune against the k-th kept plan: what cannot beat it changes none of the k
            best_t = best.prune_s()
            if e.bound_s >= best_t * ctx.caps.keep:
                if last_phase:  # otherwise the next phase goes on from here
                    frontier.set_aside(e.bound_s)  # the least bound of what is left
                    frontier.count_left()
                break
            out_of_time = ctx.clock.elapsed() > ctx.clock.limit
            if out_of_time and best.found:
                stats.timed_out = True
                if not frontier.rescue:
                    stats.lower_bound_s = min(stats.lower_bound_s, e.bound_s)
                break
            if out_of_time and not frontier.rescue:
                frontier.start_rescue()
                continue
            now = time.perf_counter()
            if self.dives.due(now):
                self.dives.run(now)
                continue
            heapq.heappop(queue)
            self.in_hand_s = e.bound_s
            self._take(e, best_t, out_of_time)
            self.in_hand_s = math.inf

    def _take(self, e: Entry, best_t: float, out_of_time: bool) -> None:
        """The front entry, popped: a group expanded; a candidate refined and queued again, or
        once refined handed to a solve (deferred where the solve slots are taken: this thread
        goes on bounding the queue, and the retries solve it); past the deadline with no plan,
        its greedy partition recorded if it fits (the most sharded candidates first)."""
        ctx, frontier = self.ctx, self.frontier
        if e.stage == "group":
            ctx.stats.groups_expanded += 1
            frontier.expand(e)
            return
        frontier.queued -= 1
        c = e.candidate
        table = ctx.tables.get(c)
        p = stage_problem(ctx.prob, c, table)
        if out_of_time:
            hint = ctx.seams.best_hint(p, ctx.deadline)
            if hint is not None:
                ctx.best.record(c, table, hint[0], hint[1], STATUS_FEASIBLE, e.bound_s)
                self.optimal_all = False
        elif e.stage == "base_bound":
            refined = frontier.refine(e, p, table, best_t)
            if refined is None:
                ctx.stats.pruned_memory += 1
            else:
                frontier.push_refined(refined, self.dives.dived)
        else:
            job = self.solves.prepare(e, p, table, defer=True, busy=self.scheduler.loop_busy())
            if job is not None:
                self.scheduler.submit_first(job)

    def _retries(self) -> None:
        """Retry what was solved without proof, most promising first, with the time left; a
        candidate whose lower bound reaches the best plan needs no proof. Up to
        scheduler.workers CP-SAT solves run at once: the bounds and hints of the next are
        computed while they run, and each finished solve is recorded, in this thread, before
        the next starts."""
        stats, solves, scheduler = self.ctx.stats, self.solves, self.scheduler
        while not stats.timed_out and (solves.open or scheduler.flying):
            if scheduler.start_retry(scheduler.workers):
                continue
            if not scheduler.flying:
                break
            scheduler.harvest(block=True)

    def _result(self) -> SearchResult:
        """The plans, OPTIMAL where nothing below the best plan was left open, or FEASIBLE
        with the gap from the least bound left open."""
        ctx, frontier = self.ctx, self.frontier
        stats, found = ctx.stats, ctx.best.found
        best_t = ctx.best.best_s()
        for b in [b for b, _ in self.solves.open.values()] + [frontier.aside]:
            if b < best_t * (1 - ctx.policy.proof_tol):
                self.optimal_all = False
                stats.lower_bound_s = min(stats.lower_bound_s, b)
        monotone_ok = frontier.monotone_ok
        if not monotone_ok:
            stats.lower_bound_s = 0.0  # the group bounds are not proven: no gap can be claimed
        optimal = found and self.optimal_all and monotone_ok and not stats.timed_out
        status = STATUS_OPTIMAL if optimal else STATUS_FEASIBLE
        gap = 0.0
        if found and status == STATUS_FEASIBLE and math.isfinite(stats.lower_bound_s):
            gap = max(0.0, (best_t - min(stats.lower_bound_s, best_t)) / best_t)
        stats.monotone_ok = monotone_ok
        stats.solve_time_s = ctx.clock.elapsed()
        return SearchResult(found, stats, status, gap)
