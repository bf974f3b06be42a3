"""The CP-SAT solves' scheduler: solves run on threads, one CP-SAT worker each (CP-SAT
releases the GIL), in the best-first loop up to `loop_workers` at once beside the loop's own
bounds and tables (on 2 CPUs one: the loop keeps the other), in the retries up to `workers`.
A finished solve is recorded on the search's thread (harvest), in candidate order; a solve
capped at a plan the best plan has since beaten is stopped (preempt)."""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from planner.ilp import StageSolution, StopHandle
from planner.search.context import Context
from planner.search.policy import SearchPolicy
from planner.search.queue import Entry
from planner.search.solves import Job, Solves
from planner.search.tables import stage_problem


def solve_workers(policy: SearchPolicy) -> int:
    """CP-SAT solves run at once (the retries; the best-first loop one fewer): the CPUs this
    process may use, at most policy.solve_workers."""
    return max(1, min(policy.solve_workers, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class SolveScheduler:
    """The solve threads and the solves on them (`flying`, each with its StopHandle), and
    the retries of the candidates left open (Solves). A context manager: the pool is shut
    down however the search ends (a solve still running ends within its time limit)."""

    def __init__(self, ctx: Context, solves: Solves):
        self.ctx, self.solves = ctx, solves
        self.workers = solve_workers(ctx.policy)
        self.loop_workers = max(1, self.workers - 1)
        self.executor = ThreadPoolExecutor(max_workers=self.workers)
        self.flying: dict[Future, Job] = {}
        self.handles: dict[Future, StopHandle] = {}
        self.busy_since = 0.0  # since when a solve has been running (ilp_time_s)

    def __enter__(self) -> SolveScheduler:
        self.executor.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.executor.__exit__(*exc)

    def loop_busy(self) -> bool:
        """The best-first loop's solve slots are all taken."""
        return len(self.flying) >= self.loop_workers

    def _run(self, job: Job, time_s: float, handle: StopHandle) -> StageSolution:
        return self.ctx.seams.solve(job.problem, time_s, job.hint, lower_bound_s=job.entry.bound_s,
                                    stop_at_s=job.stop_at_s, handle=handle)

    def submit(self, job: Job, time_s: float) -> None:
        """Start a solve of at most `time_s` (at least policy.min_solve_s)."""
        if not self.flying:
            self.busy_since = time.perf_counter()
        sliced_s = self.solves.sliced_s
        sliced_s[job.entry.order] = max(sliced_s.get(job.entry.order, 0.0), time_s)
        handle = StopHandle()
        fut = self.executor.submit(self._run, job, max(self.ctx.policy.min_solve_s, time_s), handle)
        self.flying[fut], self.handles[fut] = job, handle

    def solve_now(self, job: Job, time_s: float) -> None:
        """One solve on this thread, recorded at once: the runners-up's, after the best plan's
        proof (no solve is flying, and none is preempted: its cap is the k-th plan's)."""
        t0 = time.perf_counter()
        sol = self._run(job, max(self.ctx.policy.min_solve_s, time_s), StopHandle())
        self.ctx.stats.ilp_time_s += time.perf_counter() - t0  # the wall time with a solve running
        self.solves.finish(job, sol)

    def submit_first(self, job: Job) -> None:
        """A first solve from the best-first loop, with a first solve's time: once a slot is
        free (only a candidate with no hint, before any plan, waits for one: Solves.prepare)."""
        while self.loop_busy():
            self.harvest(block=True)
        remaining = max(self.ctx.policy.min_solve_s, self.ctx.clock.remaining())
        self.submit(job, min(remaining, self.solves.first_solve_s))

    def preempt(self) -> None:
        """Stop the solves capped at a plan that the best plan has since beaten by more than
        policy.preempt_rel: what they search is mostly above the cap a solve would have now (a
        dive's greedy plan that the next candidates' hints beat). The candidate is solved again
        at the new cap: a first solve first among the retries and with a first solve's time
        (Solves.resume), a retry as a retry. Issued again on every harvest while the solve runs
        (a stop before CP-SAT began its search is lost)."""
        best = self.ctx.best
        if not best.found:
            return
        for fut, job in self.flying.items():
            if job.stop_at_s is not None and best.best_s() * job.cap_share < job.stop_at_s * (1 - self.ctx.policy.preempt_rel):
                self.handles[fut].stop()

    def harvest(self, block: bool) -> None:
        """Record the solves that have finished; `block`: wait for one first."""
        flying, handles = self.flying, self.handles
        if not flying:
            return
        self.preempt()
        while True:
            stopping = block and any(handles[f].stopped for f in flying)
            done, _ = wait(flying, timeout=(self.ctx.policy.stop_poll_s if stopping else None) if block else 0,
                           return_when=FIRST_COMPLETED)
            if done or not block:
                break
            self.preempt()
        for fut in sorted(done, key=lambda f: flying[f].entry.order):  # one order, whichever ended first
            # stopped early (preempt): retried like a solve cut by its time
            self.solves.finish(flying.pop(fut), fut.result(), stopped=handles.pop(fut).stopped)
        if not flying:  # ilp_time_s: the wall time with a solve running, not their sum
            self.ctx.stats.ilp_time_s += time.perf_counter() - self.busy_since

    def drain(self) -> None:
        """Out of time: the solves still running end within their time limits."""
        while self.flying:
            self.harvest(block=True)

    # --- retries

    def _due_retry(self, slots: int) -> tuple[float, Entry, int] | None:
        """The open candidate to retry now, with its bound and the number of candidates
        waiting; None when none is due (the open candidates that the best plan now reaches
        are dropped first)."""
        ctx, solves = self.ctx, self.solves
        open_, retry, resume, tries = solves.open, solves.retry, solves.resume, solves.tries
        best_t = ctx.best.best_s()
        busy = {job.entry.order for job in self.flying.values()}
        for key in [key for key, (b, _) in open_.items() if b >= best_t * (1 - ctx.policy.proof_tol) and key not in busy]:
            del open_[key]
        remaining = ctx.clock.remaining()
        todo = [x for key, x in open_.items() if key in retry and key not in busy and x[0] < best_t * ctx.caps.keep]
        if not (todo and len(self.flying) < slots and remaining >= ctx.policy.retry_min_s):
            return None
        # the fewest tries first, then the least bound: each open candidate gets its turn
        bound, e = min(todo, key=lambda x: (x[1].order not in resume, tries.get(x[1].order, 0), x[0], x[1].order))
        return bound, e, len(todo)

    def _retry_time_s(self, e: Entry, waiting: int, resumed: bool, early: bool) -> float:
        """A retry's time: a share of the time left, least bound first: one hard candidate does
        not take the time the others could be proven in, and those left open at the end have
        the largest bounds (the least gap)."""
        ctx, policy = self.ctx, self.ctx.policy
        typical_s = self.solves.typical_solve_s
        remaining = ctx.clock.remaining()
        share = max(policy.retry_min_s, policy.retry_shares * self.workers * remaining / waiting,
                    remaining - policy.retry_reserve_solves * typical_s() * (waiting - 1) / self.workers)
        if resumed:
            share = self.solves.first_solve_s
        elif early:
            cap_s = max(policy.retry_min_s, policy.retry_reserve_solves * typical_s())
            found = ctx.best.found
            if ctx.caps.stop_share < 1 and found and found[0].candidate == e.candidate:
                cap_s = max(cap_s, policy.incumbent_retry_share * remaining)
            share = min(share, cap_s)
        return min(remaining, share)

    def start_retry(self, slots: int, early: bool = False) -> bool:
        """Start the retry of the open candidate with the fewest tries, then the least bound,
        on a free one of `slots` solve slots; False when none is due. `early` (from the
        best-first loop, on the CPU its solves leave idle): at most policy.retry_reserve_solves
        typical solves, so the slot is soon free for the queue again."""
        due = self._due_retry(slots)
        if due is None:
            return False
        bound, e, waiting = due
        solves = self.solves
        resumed = e.order in solves.resume  # a first solve stopped by `preempt`: not a try
        solves.resume.discard(e.order)
        if not resumed:
            solves.tries[e.order] = solves.tries.get(e.order, 0) + 1
        solves.retry.discard(e.order)
        table = self.ctx.tables.get(e.candidate)
        job = solves.prepare(e._replace(bound_s=bound), stage_problem(self.ctx.prob, e.candidate, table), table)
        if job is not None:
            job = job._replace(is_retry=not resumed)
            self.submit(job, self._retry_time_s(e, waiting, resumed, early))
        return True
