"""One candidate's solve: before CP-SAT (`prepare`: the bounds and the hint, and what they
settle without it) and after (`finish`: its partition recorded, or what it proved); and the
candidates it leaves unproven, for the retries (scheduler.py)."""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple

from cost_model.pipeline.rank_costs import StageProblem
from cost_model.specs.vocab import STATUS_FEASIBLE, STATUS_OPTIMAL
from cost_model.terms.layers import LayerTable
from planner import exhaustive as brute
from planner.bounds import PROOF_REL, tight_time_bound_s
from planner.ilp import CUTOFF, StageSolution
from planner.lp_bound import lp_time_bound_s
from planner.search.context import Context
from planner.search.hints import step_s
from planner.search.queue import Entry, Order


class Job(NamedTuple):
    """A CP-SAT solve of one candidate, prepared (Solves.prepare) and not yet run."""

    entry: Entry
    problem: StageProblem
    table: LayerTable
    hint: tuple[list[int], list[int]] | None
    stop_at_s: float | None
    is_retry: bool = False  # started by SolveScheduler.start_retry, not by the best-first loop
    cap_share: float = 1.0  # stop_at_s / the best plan's time when it was capped (SolveScheduler.preempt)


class Solves:
    """The candidates' solves and what they left open.

    open: the candidates solved without proof (CP-SAT feasible or out of time, or set aside by
        their bounds or hint within the gap): order -> (their lower bound, entry).
    retry: those of them solved again with the time left once the queue is done (those CP-SAT
        had a solution for, or that were deferred): a model it could not even place the hint
        in rarely does better with more time.
    tries: retries per candidate; resume: first solves stopped by preemption, not yet solved
        again (first among the retries, with a first solve's time).
    sliced_s: order -> the longest time limit its solves had; first_solve_s: a first solve's
        in the best-first loop.
    lp_bounds: order -> lp_bound.lp_time_bound_s, solved once per candidate.
    solve_times_s: each CP-SAT solve's wall time, for the retries' shares.
    runners_up: the candidates that may change a line of the top-k but not the best plan: kept
        from their hint, or cut off at the best plan's cap (order -> their bound, entry); solved
        at the k-th plan's cap once the best is proven (BestFirstSearch._runners_up)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        policy = ctx.policy
        self.open: dict[Order, tuple[float, Entry]] = {}
        self.retry: set[Order] = set()
        self.tries: dict[Order, int] = {}
        self.resume: set[Order] = set()
        self.lp_bounds: dict[Order, float | None] = {}
        self.solve_times_s: list[float] = []
        self.sliced_s: dict[Order, float] = {}
        self.runners_up: dict[Order, tuple[float, Entry]] = {}
        self.first_solve_s = max(policy.first_solve_min_s, ctx.clock.limit * policy.first_solve_share)

    def typical_solve_s(self) -> float:
        """The median solve so far (policy.retry_min_s before any)."""
        return statistics.median(self.solve_times_s) if self.solve_times_s else self.ctx.policy.retry_min_s

    def _with_lp(self, e: Entry, p: StageProblem, bound: float) -> float:
        """`bound` raised to the candidate's LP bound. math.inf from the LP is not used: beside
        a hint that fits it would be a numerical artefact."""
        if e.order not in self.lp_bounds:  # a retry asks again: solved once per candidate
            self.lp_bounds[e.order] = lp_time_bound_s(p)
        lp = self.lp_bounds[e.order]
        return max(bound, lp) if lp is not None and lp < math.inf else bound

    def _empty_ends(self, e: Entry, p: StageProblem, table: LayerTable) -> None:
        """More stages than blocks: at most 4 partitions (the empty-end layouts, none or every
        block recomputed), all priced; the best is the candidate's optimum, with no bound or
        CP-SAT needed."""
        self.open.pop(e.order, None)
        best = brute.best_empty_end_partition(p)
        if best is None:
            self.ctx.stats.infeasible += 1
        else:
            self.ctx.best.record(e.candidate, table, best[1], best[2], STATUS_OPTIMAL)

    def _defer(self, e: Entry) -> None:
        self.ctx.stats.deferred += 1
        self.open[e.order] = (e.bound_s, e)
        self.retry.add(e.order)

    def prepare(self, e: Entry, p: StageProblem, table: LayerTable, defer: bool = False,
                busy: bool = False) -> Job | None:
        """A candidate's solve up to CP-SAT: the hint, the bounds, and what they settle without it
        (None: recorded or set aside); otherwise the CP-SAT job, capped at the best plan now.
        `defer`: a first solve of the best-first loop, deferred to a retry where its hint is
        more than policy.defer_rel above its bound. `busy` (with `defer`: the loop's solve slots
        are taken): the candidate is deferred as one far from its bound is (its hint recorded;
        one without a hint only once a plan is found: until then the loop waits for the slot)."""
        ctx = self.ctx
        stats, best, policy, keep = ctx.stats, ctx.best, ctx.policy, ctx.caps.keep
        if p.more_stages_than_blocks:
            self._empty_ends(e, p, table)
            return None
        # the bounds first, at full precision, and once a plan is found also the LP of the
        # lock-step model under interleaving (it prices uneven chunks that the rank-wise bound
        # lets a rank use to fit its memory for free): a candidate they set aside needs no hint
        bound = max(e.bound_s, tight_time_bound_s(p, ctx.tables.get_sums(e.candidate), rel=PROOF_REL))
        if best.found and bound < best.best_s() * keep:
            bound = self._with_lp(e, p, bound)  # it may set the candidate aside before a hint is built
        e = e._replace(bound_s=bound)
        if not best.can_change(e.candidate, bound / keep):
            self.open[e.order] = (bound, e)  # changes none of the k plans (dropped once the queue is done)
            return None
        own = best.own(e.candidate)
        if own is not None:  # a retry: start from what the first solve found
            hint = (list(own.config.stage_layers), list(own.config.recompute_layers or [0] * len(own.config.stage_layers)))
        else:
            hint = ctx.seams.best_hint(p, ctx.deadline)
        hint_s = step_s(p, *hint) if hint is not None else None
        if hint_s is not None:
            if not best.found and bound < hint_s * (1 - policy.proof_tol):
                bound = self._with_lp(e, p, bound)  # no plan yet to set it aside against: only beside a hint
                e = e._replace(bound_s=bound)
            if bound >= hint_s * (1 - policy.proof_tol):  # the hint is optimal: CP-SAT has nothing to prove
                self.open.pop(e.order, None)
                stats.proven_by_bound += 1
                best.record(e.candidate, table, hint[0], hint[1], STATUS_OPTIMAL, bound)
                return None
            if best.found and bound >= best.best_s() * keep:
                # a runner-up at most (below the k-th plan, not below the best): its hint's
                # partition is kept with its bound, so the alternative states its gap; CP-SAT's
                # time goes to the best plan's proof
                best.record(e.candidate, table, hint[0], hint[1], STATUS_FEASIBLE, bound)
                self.runners_up[e.order] = (bound, e)
                return None
            if bound >= hint_s * keep:  # the hint is within the gap limit of its bound
                self.open[e.order] = (bound, e)
                best.record(e.candidate, table, hint[0], hint[1], STATUS_FEASIBLE, bound)
                return None
            if defer and (busy or hint_s > bound * (1 + policy.defer_rel)):
                self._defer(e)
                best.record(e.candidate, table, hint[0], hint[1], STATUS_FEASIBLE, bound)
                return None
        if best.found and bound >= best.best_s() * keep:
            self.runners_up[e.order] = (bound, e)  # a runner-up at most, no partition of the greedy kind fits
            return None
        if hint_s is None and defer and busy and best.found:
            # no partition of the greedy kind fits: rather than wait for the slot (a solve may
            # take seconds), its solve waits for a retry as a deferred candidate's does
            self._defer(e)
            return None
        # a first solve (the best-first loop's: `defer`) is capped at the gap asked for: it is
        # given a first solve's time, and a cap at policy.staged_gap would need a second solve
        # for the rest. A retry is capped at the phase's
        share = ctx.caps.final_stop_share if defer else ctx.caps.stop_share
        return Job(e, p, table, hint, best.best_s() * share if best.found else None, cap_share=share)

    def finish(self, job: Job, sol: StageSolution, stopped: bool = False) -> None:
        """A candidate's solve after CP-SAT: record its partition, or what it proved (its time
        counts in ilp_time_s as the wall time with a solve running: SolveScheduler.harvest).
        `stopped`: its StopHandle was stopped (preemption)."""
        ctx = self.ctx
        stats, policy = ctx.stats, ctx.policy
        e, p, table, hint = job.entry, job.problem, job.table, job.hint
        stats.ilp_solves += 1
        if stopped and not job.is_retry and sol.status in ("unknown", STATUS_FEASIBLE):
            self.resume.add(e.order)
        self.solve_times_s.append(sol.solve_time_s)
        if sol.status in (STATUS_OPTIMAL, STATUS_FEASIBLE):
            counts, rcs, status = list(sol.stage_layers), list(sol.recompute_layers), sol.status
            if status == STATUS_FEASIBLE:
                own_s = step_s(p, counts, rcs)
                if own_s is not None and sol.bound_s >= own_s * (1 - policy.proof_tol):
                    status = STATUS_OPTIMAL  # stopped at a bound that reaches its own plan
            if status == STATUS_FEASIBLE:
                self.open[e.order] = (max(e.bound_s, sol.bound_s), e)
                self.retry.add(e.order)
            else:
                self.open.pop(e.order, None)
        elif hint is not None:
            # CP-SAT's bound holds when it stopped without a partition, not when its rounded
            # memory rejects one the float model takes (infeasible)
            counts, rcs, status = hint[0], hint[1], STATUS_FEASIBLE
            self.open[e.order] = (e.bound_s if sol.status == "infeasible" else max(e.bound_s, sol.bound_s), e)
            if sol.status == "unknown" and job.stop_at_s is not None:
                # capped at the best plan (another's, or its own hint's), the hint is outside
                # the model: more time may prove it
                self.retry.add(e.order)
        elif sol.status == CUTOFF:
            self.open[e.order] = (max(e.bound_s, sol.bound_s), e)  # no faster than its cap
            self.runners_up[e.order] = (max(e.bound_s, sol.bound_s), e)
            return
        else:
            if sol.status == "unknown":
                self.open[e.order] = (max(e.bound_s, sol.bound_s), e)
                # 1e-9: float rounding of the time limit it was given
                if stopped or self.sliced_s.get(e.order, 0.0) < self.first_solve_s * (1 - 1e-9):
                    # deferred without a hint and cut as a retry, before a first solve's
                    # time, or stopped early: it gets its turn again
                    self.retry.add(e.order)
            else:
                self.open.pop(e.order, None)
            stats.infeasible += 1
            return
        ctx.best.record(e.candidate, table, counts, rcs, status, max(e.bound_s, sol.bound_s))
