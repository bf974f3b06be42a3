"""The search's tuning constants, in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchPolicy:
    """How the search shares its time limit between bounding, CP-SAT solves and retries, and
    when it defers, preempts or dives. Each field trades a search that closes its gap sooner
    against one that proves more or wastes less; the measurements behind each value are in
    docs/results.md, "Search policy: why each constant has its value".

    progress_after_s, progress_every_s: the first progress line after this long, then at most
        one every progress_every_s: quiet for the searches that end at once, a sign of life for
        those that take their limit.
    enumeration_share: share of the time limit the degree groups' bounds (one base table per
        (tp, cp, ep, etp, sp)) may take before the best-first search starts; the groups not
        bounded by then are queued with the bound 0 (valid, expanded first). More: more groups
        pruned whole; less: more of the limit left to search a very large space, its gap honest.
    proof_tol: relative tolerance at which a bound reaching a plan's time proves it (the
        pruning test's): float rounding, not a gap.
    defer_rel: a candidate whose hint is more than this above its bound is not solved in the
        best-first loop but deferred to the retries (its hint recorded): the loop goes on
        bounding instead of waiting for a solve with much left to prove.
    first_solve_share, first_solve_min_s: one first solve may take this share of the time
        limit, at least first_solve_min_s: the candidates solved at once have a hint within
        defer_rel of their bound, and a CP-SAT solve cut and retried restarts from scratch.
    min_solve_s: the least time limit a CP-SAT solve is started with (one started at the
        deadline still returns what its hint gives).
    retry_shares: a retry may take this many equal shares of the time left: most take far
        less (CP-SAT proves a capped model infeasible in a fraction of a second), and one cut
        short restarts from scratch.
    retry_reserve_solves: ... or, where more, all the time left but this many typical solves
        (the median of the search's solves so far) for each other candidate waiting; and an
        early retry from the best-first loop at most this many, so its slot is soon free again.
        The waiting candidates are mostly proven in a typical solve each, and a hard one cut at
        an equal share restarts from scratch on its next try.
    solve_workers: CP-SAT solves run at once in the retries (the best-first loop: one fewer,
        beside its own thread), one CP-SAT worker each, at most the CPUs available. One solve
        with two workers was slower than two with one on these small models; 2 is the CI
        machine's core count, the only count measured.
    retry_min_s: the least time left worth a retry of an unproven candidate (CP-SAT rarely
        proves in less), and the typical solve before any has run.
    incumbent_retry_share: an early retry of the best plan's own candidate under a gap limit
        (or in the first phase: staged_gap) may take this share of the time left: the search
        cannot end within the gap without its capped solve, and one cut at two typical solves
        restarts from scratch each time. Not for an exact proof: that may take longer than the
        whole limit and crowd out the other retries.
    staged_gap: below this gap limit the search runs in two phases: first at this gap (every
        CP-SAT solve capped this far below the best plan, the candidates whose bounds are within
        it left for later), then at the gap asked for with the time left, from the queue and
        the open candidates the first phase left. CP-SAT proves "nothing below (1 - gap) x the
        best" far sooner than the exact optimum, so a search cut by its limit has closed its
        gap to staged_gap first; one with time enough proves the optimum a little later.
    preempt_rel: a running solve capped at a plan that the best plan now beats by more than
        this is stopped and its candidate solved again at the new cap: most of what it searches
        lies above the cap it would have now. Less: more solves stopped, each losing its work.
    stop_poll_s: while a stop is pending, the search looks again this often (and issues the
        stop again: one issued before CP-SAT began its search is lost).
    dive_after_share, dive_every_share: after this share of the time limit, the best-first
        loop records a greedy plan now and then (a dive): at once while no plan is found, then
        once every dive_every_share of the limit while the least queued bound is below the best
        plan. A plan to prune against, where best-first order alone would refine candidates
        whose bounds sit below the optimum for the whole limit (a large MoE space).
    dive_time_share: once a plan is found, dives only while they have taken less than this
        share of the time so far: each prices up to dive_pool tables and partitions.
    runner_up_share: once the best plan is proven, the runners-up (the lines of the top-k kept
        from a hint, or cut off at the best plan's cap) are solved at the k-th plan's cap for at
        most this share of the time the search took so far, or runner_up_min_s where that is
        more (a small search proves its few runners-up in well under it), within its limit; what is
        left unproven says its gap. More: more proven alternatives, a longer answer.
    deadline_grace_share, deadline_grace_min_s, deadline_grace_max_s: the hard deadline
        (planner/deadline.py) sits this share of the time limit beyond it, at least the min
        (the rescue after the limit records a greedy plan, if any fits) and at most the max;
        past it the loops that grow with the model's blocks and the candidates stop.
    dive_pool: the least-bound queued candidates a dive prices with their own tables before it
        records the best that has a partition that fits (the dived candidate stays queued for
        its exact solve).
    """

    progress_after_s: float = 2.0
    progress_every_s: float = 2.0
    enumeration_share: float = 0.6
    proof_tol: float = 1e-9
    defer_rel: float = 0.01
    first_solve_share: float = 0.5
    first_solve_min_s: float = 1.0
    min_solve_s: float = 0.05
    retry_shares: float = 2.0
    retry_reserve_solves: float = 2.0
    solve_workers: int = 2
    retry_min_s: float = 0.5
    incumbent_retry_share: float = 0.4
    staged_gap: float = 0.01
    preempt_rel: float = 0.01
    stop_poll_s: float = 0.05
    dive_after_share: float = 0.1
    dive_every_share: float = 0.02
    dive_time_share: float = 0.1
    dive_pool: int = 16
    runner_up_share: float = 0.25
    runner_up_min_s: float = 0.3
    deadline_grace_share: float = 0.25
    deadline_grace_min_s: float = 1.0
    deadline_grace_max_s: float = 3.0

    def deadline_grace_s(self, limit_s: float) -> float:
        """How far beyond the time limit the hard deadline sits."""
        return min(self.deadline_grace_max_s, max(self.deadline_grace_min_s, self.deadline_grace_share * limit_s))
