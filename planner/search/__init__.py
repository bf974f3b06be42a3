"""The search: enumerate candidates (space.py), order them by an optimistic time bound,
prune by memory and time bounds (bounds.py) against the best plan so far, and solve the stage
partition of each survivor exactly (ilp.py; greedy.py as hint and fallback; exhaustive.py
for the reference search)."""

from __future__ import annotations

import heapq
import math
import os
import statistics
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Literal, NamedTuple

from cost_model import memory
from cost_model.layers import LayerTable
from cost_model.rank_costs import StageProblem, capacity_bytes
from cost_model.results import GIB
from cost_model.vocab import (
    DISPATCHER_ALLTOALL,
    ENGINE_MEGATRON,
    RECOMPUTE_FULL,
    STATUS_FEASIBLE,
    STATUS_OPTIMAL,
)

from .. import exhaustive as brute
from ..bounds import (
    PROOF_REL,
    base_memory_bound_bytes,
    base_time_bound_s,
    cheap_time_bound_s,
    group_bound_applies,
    group_time_bound_s,
    memory_bound_bytes,
    per_sample_time_s,
    tight_time_bound_s,
)
from ..ilp import CUTOFF, StopHandle
from ..lp_bound import lp_time_bound_s
from ..space import (
    Candidate,
    DegreeGroup,
    a2a_overlap_values,
    cp_comm_values,
    degree_groups,
    dispatcher_values,
    micro_batch_values,
    sequence_parallel_values,
)
from .hints import best_hint, step_s
from .incumbent import Incumbent
from .policy import SearchPolicy
from .reference import search_exhaustive
from .results import (
    Found,
    Problem,
    Progress,
    Reporter,
    SearchResult,
    SearchStats,
)
from .seams import Seams
from .tables import LayerTables, stage_problem, to_config

__all__ = [
    "Found",
    "LayerTables",
    "Problem",
    "Progress",
    "SearchPolicy",
    "SearchResult",
    "SearchStats",
    "Seams",
    "best_hint",
    "search",
    "search_exhaustive",
    "solve_workers",
    "stage_problem",
    "to_config",
]

# What a queued entry is: a degree group bounded as a whole (bounds.group_time_bound_s), a
# candidate with its base-table bound (cheap, every candidate of an expanded group), or a
# candidate refined with its own table and the tight bound (it reached the front once already).
Stage = Literal["group", "base_bound", "refined"]


class _Entry(NamedTuple):
    """An entry of the best-first queue, ordered by (bound, enumeration order): the order,
    (group index, index in the group; -1 for the group itself), is unique, so the stage and
    the item are never compared (a tuple, so that the heap compares in C)."""

    bound_s: float
    order: tuple[int, int]
    stage: Stage
    candidate: Candidate | DegreeGroup


def search(
    prob: Problem,
    exhaustive: bool = False,
    deadline_s: float | None = None,
    progress: Progress | None = None,
    *,
    progress_after_s: float | None = None,
    progress_every_s: float | None = None,
    policy: SearchPolicy = SearchPolicy(),
    seams: Seams = Seams(),
) -> SearchResult:
    """Best-first over degree groups and candidates: each group is queued with its group
    bound; at the front it is expanded into its candidates, each queued with its base-table
    bound; a candidate at the front is refined (its own table, the tight bound) and queued
    again; at the front once refined it is solved on a CP-SAT thread while this thread goes
    on (when its hint is within policy.defer_rel of its bound and a solve slot is free; otherwise
    the hint is recorded and the solve deferred until the queue is done, then capped at the
    best plan: prepare). Stops when the front's bound reaches the
    best plan (everything left is pruned by a bound >= the best: OPTIMAL if every solve was
    optimal), or at the deadline (FEASIBLE; the gap from the least bound left open). Below
    policy.staged_gap this runs twice: first as a search at policy.staged_gap, then at the gap asked for,
    from the queue and the open candidates the first left. A solve capped at a plan the best
    plan has since beaten is stopped and solved again at the new cap (preempt)."""
    if exhaustive:
        return search_exhaustive(prob, progress, progress_after_s=progress_after_s,
                                 progress_every_s=progress_every_s, policy=policy)
    t0 = time.perf_counter()
    limit = prob.space.time_limit_s if deadline_s is None else deadline_s
    stats = SearchStats()
    tables = LayerTables(prob)
    gpu = prob.cluster.gpu
    cap = capacity_bytes(gpu.memory_gib, prob.space.memory_headroom)
    k = prob.space.top_k
    B = prob.training.global_batch_size
    engine = (prob.space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    # a bound at or above keep x the best plan is not searched further (search.gap_limit; CP-SAT
    # is capped there too, which proves far sooner); the least such bound below the best plan
    # is kept for the reported gap (`set_aside`), which stays within the limit
    # (policy.staged_gap: the first phase's keep and cap are those of a search at policy.staged_gap)
    final_keep = 1 - max(policy.proof_tol, prob.space.gap_limit)
    phase_gaps = [policy.staged_gap, prob.space.gap_limit] if prob.space.gap_limit < policy.staged_gap else [prob.space.gap_limit]
    keep = 1 - max(policy.proof_tol, phase_gaps[0])
    stop_share = 1 - phase_gaps[0]  # CP-SAT searches only below this x the best plan
    final_stop_share = 1 - prob.space.gap_limit
    aside = math.inf

    def set_aside(bound: float) -> None:
        nonlocal aside
        if bound < best_s() * (1 - policy.proof_tol):
            aside = min(aside, bound)

    # --- degree groups, bounded per (tp, cp, ep, etp) from one base table per SP setting at
    # the largest micro-batch size any of their groups may take (bounds.py, degree groups)
    groups = [g for g in degree_groups(prob.model, prob.cluster, prob.training, prob.space)
              if micro_batch_values(prob.space, B, g.dp)]
    mb_ref: dict[tuple, int] = {}
    for g in groups:
        key = (g.tp, g.cp, g.ep, g.etp)
        mb_ref[key] = max(mb_ref.get(key, 0), micro_batch_values(prob.space, B, g.dp)[-1])
    # per (tp, cp, ep, etp, sp): the least per-sample time of any micro-batch size <= mb_ref
    per_sample: dict[tuple, float] = {}
    use_groups = group_bound_applies(prob.profile)
    layout_s: dict[tuple, float] = {}
    for key, mb in mb_ref.items():
        if not use_groups or time.perf_counter() - t0 > policy.enumeration_share * limit:
            layout_s[key] = 0.0  # unbounded (valid): the group is expanded when it reaches the front
            continue
        least = math.inf
        # the overlapped 1F1B all-to-all can make a layer slower as well as faster (its schedule
        # nodes' host work, moe.COMBINED_SCHEDULE_HOST_OPS), and DeepEP's one permute of the
        # received rows can outweigh its smaller traffic: the least over the settings searched
        overlaps = a2a_overlap_values(prob.model, prob.space, engine, key[2]) or [False]
        disps = dispatcher_values(prob.model, prob.cluster, prob.space, key[2], key[3], prob.training) or [
            DISPATCHER_ALLTOALL]
        for sp in sequence_parallel_values(prob.space, key[0]):
            for cc in cp_comm_values(prob.model, prob.space, engine, key[0], key[1]):
                per_sample[(*key, sp, cc)] = min(
                    per_sample_time_s(tables.base_at(*key, sp, mb, engine, ov, cc, d)[1], mb)
                    for ov in overlaps for d in disps)
                least = min(least, per_sample[(*key, sp, cc)])
        layout_s[key] = least
    queue: list[_Entry] = [
        _Entry(group_time_bound_s(B, g.dp, g.pp, layout_s[(g.tp, g.cp, g.ep, g.etp)]), (i, -1), "group", g)
        for i, g in enumerate(groups)
    ]
    heapq.heapify(queue)
    stats.groups = len(queue)

    # The base memory bound never decreases with the micro-batch size when the other knobs
    # are fixed (states do not depend on it; activations are mb x min(c1, c2 m)/k with
    # m = B/(dp mb), memory.in_flight_micro_batches), so once a micro-batch size is ruled
    # out every larger one is too, without building its table. Keyed by the candidate
    # with its micro-batch size blanked.
    too_big_mb: dict[tuple, int] = {}
    mem_lbs: dict[Candidate, float] = {}  # base memory bound per candidate (overlap setting off)
    monotone_ok = True  # per-sample monotonicity held on every base table built
    queued = 0  # candidate entries in the queue

    def expand(e: _Entry) -> None:
        """Queue the candidates of a group with their base bounds (memory pruned here)."""
        nonlocal monotone_ok, queued
        gi, g = e.order[0], e.candidate
        for j, c in enumerate(seams.group_candidates(prob.model, prob.training, prob.space, g, prob.profile)):
            stats.candidates += 1
            # the base memory bound does not depend on the overlapped all-to-all (its extra
            # warm-up micro-batch is left out of the bound): the two settings share it
            mb_key = (c.dp, c.tp, c.pp, c.cp, c.ep, c.etp, c.vpp, c.schedule, c.sequence_parallel, c.zero, c.recompute,
                      c.cp_comm, c.moe_dispatcher)
            if c.micro_batch_size >= too_big_mb.get(mb_key, math.inf):
                stats.pruned_memory += 1
                continue
            m = B // (c.dp * c.micro_batch_size)
            base_table, base_sums = tables.base(c)
            least = per_sample.get((c.tp, c.cp, c.ep, c.etp, c.sequence_parallel, c.cp_comm))
            if least is not None and per_sample_time_s(base_sums, c.micro_batch_size) < least * (1 - 1e-9):
                monotone_ok = False  # the group bounds may have pruned too much: claim nothing
            bound = max(e.bound_s, base_time_bound_s(base_sums, base_table, c, m))
            if found and bound >= best_s() * final_keep:  # a later phase would not search it either
                set_aside(bound)
                stats.pruned_time += 1  # no faster than the best plan: its memory bound is not needed
                continue
            twin = replace(c, moe_a2a_overlap=False) if c.moe_a2a_overlap else c
            mem_lb = mem_lbs.get(twin)
            if mem_lb is None:
                reserved = memory.reserved_bytes(to_config(c), prob.model)
                mem_lb = mem_lbs[twin] = base_memory_bound_bytes(base_sums, prob.training, c, m, reserved)
            stats.note_memory(mem_lb / GIB, c)
            if mem_lb > cap:
                stats.pruned_memory += 1
                too_big_mb[mb_key] = min(c.micro_batch_size, too_big_mb.get(mb_key, math.inf))
                continue
            heapq.heappush(queue, _Entry(_fit_key(c) if rescue else bound, (gi, j), "base_bound", c))
            if not rescue:
                heapq.heappush(pool, _Entry(bound, (gi, j), "base_bound", c))
            queued += 1

    incumbent = Incumbent(prob, k)
    found = incumbent.found
    optimal_all = True
    # past the deadline with no plan: the queue is re-keyed by _fit_key (the most sharded
    # first) so that the first plan that fits comes soon; the bounds left were kept for the gap
    rescue = False
    report = Reporter(progress, t0, policy.progress_after_s if progress_after_s is None else progress_after_s,
                      policy.progress_every_s if progress_every_s is None else progress_every_s)

    def best_s() -> float:
        return found[0].estimate.prediction.step_time_s if found else math.inf

    def line() -> str:
        best = f"{best_s():.4g} s" if found else "none yet"
        return (f"search: {stats.candidates - queued:,} of {stats.candidates:,} candidates examined, {queued:,} left, "
                f"{stats.groups - stats.groups_expanded:,} of {stats.groups:,} degree groups unexpanded, "
                f"{stats.ilp_solves} solved, best step {best}, {time.perf_counter() - t0:.1f} s elapsed")

    def own_cheap_bound(c: Candidate, table: LayerTable, m: int, reserved: float) -> float | None:
        """The cheap time bound of the candidate's own table; None when its memory bound
        rules it out."""
        sums = tables.get_sums(c)
        if memory_bound_bytes(sums, c.recompute, c.schedule, c.pp, c.vpp, m, reserved) > cap:
            return None
        return cheap_time_bound_s(sums, table, c.recompute, c.pp, c.vpp, m)

    def refine(e: _Entry, p: StageProblem, table: LayerTable, best_t: float) -> _Entry | None:
        """The candidate's own-table bounds; None when memory rules it out."""
        c = e.candidate
        refined = own_cheap_bound(c, table, p.num_micro_batches, p.reserved_bytes)
        if refined is None:
            return None
        if refined < best_t:
            refined = max(refined, tight_time_bound_s(p, tables.get_sums(c), cutoff=best_t))
        if refined == math.inf:
            return None
        return _Entry(max(e.bound_s, refined), e.order, "refined", c)

    # candidates solved without proof (CP-SAT feasible or out of time): order -> (their
    # lower bound, entry); those CP-SAT had a solution for (`retry`) are solved again with
    # the time left once the queue is done: a model it could not even place the hint in
    # rarely does better with more time
    open_: dict[tuple[int, int], tuple[float, _Entry]] = {}
    retry: set[tuple[int, int]] = set()
    tries: dict[tuple[int, int], int] = {}  # retries per candidate
    lp_bounds: dict[tuple[int, int], float | None] = {}  # order -> lp_bound.lp_time_bound_s
    pool: list[_Entry] = []  # every queued candidate entry, least bound first: the dives' choice
    solve_times_s: list[float] = []  # each CP-SAT solve's wall time, for the retries' shares

    def run_job(job: _Job, time_s: float, handle: StopHandle):
        return seams.solve(job.problem, time_s, job.hint, lower_bound_s=job.entry.bound_s, stop_at_s=job.stop_at_s,
                     handle=handle)

    def typical_solve_s() -> float:
        return statistics.median(solve_times_s) if solve_times_s else policy.retry_min_s
    dived: set[tuple[int, int]] = set()
    last_dive = -math.inf
    dive_s = 0.0  # time the dives took

    def dive_due(now: float) -> bool:
        if not pool or now - t0 < policy.dive_after_share * limit:
            return False
        if not found:
            return True
        return (now - last_dive >= policy.dive_every_share * limit and pool[0].bound_s < best_s() * keep
                and dive_s < policy.dive_time_share * (now - t0))

    def dive() -> None:
        """Record a greedy plan (policy.dive_after_share): of the policy.dive_pool least-bound candidates,
        the one whose own table's cheap bound is least and that has a partition that fits; the
        others go back to the pool with that bound."""
        nonlocal last_dive
        last_dive = time.perf_counter()
        picks: list[_Entry] = []
        while pool and len(picks) < policy.dive_pool:
            e = heapq.heappop(pool)
            if e.order in dived:
                continue
            c = e.candidate
            dived.add(e.order)
            own = own_cheap_bound(c, tables.get(c), B // (c.dp * c.micro_batch_size),
                                  memory.reserved_bytes(to_config(c), prob.model))
            if own is not None:
                picks.append(e._replace(bound_s=max(e.bound_s, own)))
        picks.sort()
        for i, e in enumerate(picks):
            table = tables.get(e.candidate)
            hint = seams.best_hint(stage_problem(prob, e.candidate, table))
            if hint is not None:
                stats.dives += 1
                incumbent.record(e.candidate, table, hint[0], hint[1], STATUS_FEASIBLE)
                for x in picks[i + 1:]:
                    dived.discard(x.order)
                    heapq.heappush(pool, x)
                return

    def prepare(e: _Entry, p: StageProblem, table: LayerTable, defer: bool = False, busy: bool = False) -> _Job | None:
        """A candidate's solve up to CP-SAT: the hint, the bounds, and what they settle without it
        (None: recorded or set aside); otherwise the CP-SAT job, capped at the best plan now.
        `busy` (with `defer`: the best-first loop's solve slots are taken): the candidate is
        deferred as one far from its bound is, to a retry (its hint recorded; one without a
        hint only once a plan is found: until then the loop waits for the slot)."""
        if p.more_stages_than_blocks:
            # at most 4 partitions (the empty-end layouts, none or every block recomputed):
            # all priced, the best is the candidate's optimum; no bound or CP-SAT needed
            open_.pop(e.order, None)
            best = brute.best_empty_end_partition(p)
            if best is None:
                stats.infeasible += 1
            else:
                incumbent.record(e.candidate, table, best[1], best[2], STATUS_OPTIMAL)
            return None

        # the bounds first, at full precision, and once a plan is found also the LP of the
        # lock-step model under interleaving (it prices uneven chunks that the rank-wise bound
        # lets a rank use to fit its memory for free): a candidate they set aside needs no
        # hint. math.inf from the LP is not used: beside a hint that fits it would be a
        # numerical artefact
        def with_lp(bound: float) -> float:
            if e.order not in lp_bounds:  # a retry asks again: solved once per candidate
                lp_bounds[e.order] = lp_time_bound_s(p)
            lp = lp_bounds[e.order]
            return max(bound, lp) if lp is not None and lp < math.inf else bound

        bound = max(e.bound_s, tight_time_bound_s(p, tables.get_sums(e.candidate), rel=PROOF_REL))
        if found and bound < best_s() * keep:
            bound = with_lp(bound)  # it may set the candidate aside before a hint is built
        e = e._replace(bound_s=bound)
        if found and bound >= best_s() * keep:
            open_[e.order] = (bound, e)  # no faster than the best plan (dropped once the queue is done)
            return
        own = next((f for f in found if f.candidate == e.candidate), None)
        if own is not None:  # a retry: start from what the first solve found
            hint = (list(own.config.stage_layers), list(own.config.recompute_layers or [0] * len(own.config.stage_layers)))
        else:
            hint = seams.best_hint(p)
        hint_s = step_s(p, *hint) if hint is not None else None
        if hint_s is not None:
            if not found and bound < hint_s * (1 - policy.proof_tol):
                bound = with_lp(bound)  # no plan yet to set it aside against: only beside a hint
                e = e._replace(bound_s=bound)
            if bound >= hint_s * (1 - policy.proof_tol):  # the hint is optimal: CP-SAT has nothing to prove
                open_.pop(e.order, None)
                stats.proven_by_bound += 1
                incumbent.record(e.candidate, table, hint[0], hint[1], STATUS_OPTIMAL)
                return
            if bound >= hint_s * keep:  # the hint is within the gap limit of its bound
                open_[e.order] = (bound, e)
                incumbent.record(e.candidate, table, hint[0], hint[1], STATUS_FEASIBLE)
                return
            if defer and (busy or hint_s > bound * (1 + policy.defer_rel)):
                stats.deferred += 1
                open_[e.order] = (bound, e)
                retry.add(e.order)
                incumbent.record(e.candidate, table, hint[0], hint[1], STATUS_FEASIBLE)
                return
        elif defer and busy and found:
            # no partition of the greedy kind fits: rather than wait for the slot (a solve may
            # take seconds), its solve waits for a retry as a deferred candidate's does
            stats.deferred += 1
            open_[e.order] = (bound, e)
            retry.add(e.order)
            return
        # a first solve (the best-first loop's: `defer`) is capped at the gap asked for: it is
        # given a first solve's time, and a cap at policy.staged_gap would need a second solve for
        # the rest. A retry is capped at the phase's
        share = final_stop_share if defer else stop_share
        return _Job(e, p, table, hint, best_s() * share if found else None, cap_share=share)

    def finish(job: _Job, sol, stopped: bool = False) -> None:
        """A candidate's solve after CP-SAT: record its partition, or what it proved (its time
        counts in ilp_time_s as the wall time with a solve running: harvest). `stopped`: its
        StopHandle was stopped (preempt)."""
        e, p, table, hint = job.entry, job.problem, job.table, job.hint
        stats.ilp_solves += 1
        if stopped and not job.is_retry and sol.status in ("unknown", STATUS_FEASIBLE):
            resume.add(e.order)
        solve_times_s.append(sol.solve_time_s)
        if sol.status in (STATUS_OPTIMAL, STATUS_FEASIBLE):
            counts, rcs, status = list(sol.stage_layers), list(sol.recompute_layers), sol.status
            if status == STATUS_FEASIBLE:
                own_s = step_s(p, counts, rcs)
                if own_s is not None and sol.bound_s >= own_s * (1 - policy.proof_tol):
                    status = STATUS_OPTIMAL  # stopped at a bound that reaches its own plan
            if status == STATUS_FEASIBLE:
                open_[e.order] = (max(e.bound_s, sol.bound_s), e)
                retry.add(e.order)
            else:
                open_.pop(e.order, None)
        elif hint is not None:
            # CP-SAT's bound holds when it stopped without a partition, not when its rounded
            # memory rejects one the float model takes (infeasible)
            counts, rcs, status = hint[0], hint[1], STATUS_FEASIBLE
            open_[e.order] = (e.bound_s if sol.status == "infeasible" else max(e.bound_s, sol.bound_s), e)
            if sol.status == "unknown" and job.stop_at_s is not None:
                # capped at the best plan (another's, or its own hint's), the hint is outside
                # the model: more time may prove it
                retry.add(e.order)
        elif sol.status == CUTOFF:
            open_[e.order] = (max(e.bound_s, sol.bound_s), e)  # no faster than the best plan
            return
        else:
            if sol.status == "unknown":
                open_[e.order] = (max(e.bound_s, sol.bound_s), e)
                if stopped or sliced_s.get(e.order, 0.0) < first_solve_s * (1 - 1e-9):
                    # deferred without a hint and cut as a retry, before a first solve's
                    # time, or stopped early: it gets its turn again
                    retry.add(e.order)
            else:
                open_.pop(e.order, None)
            stats.infeasible += 1
            return
        incumbent.record(e.candidate, table, counts, rcs, status)

    # CP-SAT solves run on threads, one CP-SAT worker each (CP-SAT releases the GIL): in the
    # best-first loop up to `loop_workers` at once beside this thread's bounds and tables (on
    # 2 CPUs one: this thread keeps the other), in the retries up to `workers`. A finished
    # solve is recorded in this thread (harvest), in candidate order.
    workers = solve_workers(policy)
    loop_workers = max(1, workers - 1)
    executor = ThreadPoolExecutor(max_workers=workers)
    flying: dict[Future, _Job] = {}
    handles: dict[Future, StopHandle] = {}
    resume: set[tuple[int, int]] = set()  # first solves stopped by `preempt`, not yet solved again
    sliced_s: dict[tuple[int, int], float] = {}  # order -> the longest time limit its solves had
    first_solve_s = max(policy.first_solve_min_s, limit * policy.first_solve_share)  # a first solve's in the best-first loop
    busy_since = 0.0

    def submit(job: _Job, time_s: float) -> None:
        nonlocal busy_since
        if not flying:
            busy_since = time.perf_counter()
        sliced_s[job.entry.order] = max(sliced_s.get(job.entry.order, 0.0), time_s)
        handle = StopHandle()
        fut = executor.submit(run_job, job, max(policy.min_solve_s, time_s), handle)
        flying[fut], handles[fut] = job, handle

    def preempt() -> None:
        """Stop the solves capped at a plan that the best plan has since beaten by more than
        policy.preempt_rel: what they search is mostly above the cap a solve would have now (a
        dive's greedy plan that the next candidates' hints beat). The candidate is solved again
        at the new cap: a first solve first among the retries and with a first solve's time
        (`resume`), a retry as a retry. Issued again on every harvest while the solve runs (a
        stop before CP-SAT began its search is lost)."""
        if not found:
            return
        for fut, job in flying.items():
            if job.stop_at_s is not None and best_s() * job.cap_share < job.stop_at_s * (1 - policy.preempt_rel):
                handles[fut].stop()

    def harvest(block: bool) -> None:
        """Record the solves that have finished; `block`: wait for one first."""
        if not flying:
            return
        preempt()
        while True:
            stopping = block and any(handles[f].stopped for f in flying)
            done, _ = wait(flying, timeout=(policy.stop_poll_s if stopping else None) if block else 0,
                           return_when=FIRST_COMPLETED)
            if done or not block:
                break
            preempt()
        for fut in sorted(done, key=lambda f: flying[f].entry.order):  # one order, whichever ended first
            # stopped early (preempt): retried like a solve cut by its time
            finish(flying.pop(fut), fut.result(), stopped=handles.pop(fut).stopped)
        if not flying:  # ilp_time_s: the wall time with a solve running, not their sum
            stats.ilp_time_s += time.perf_counter() - busy_since

    def start_retry(slots: int, early: bool = False) -> bool:
        """Start the retry of the open candidate with the fewest tries, then the least bound,
        on a free one of `slots` solve slots (the open candidates that the best plan now
        reaches are dropped first); False when none is due. `early` (from the best-first
        loop, on the CPU its solves leave idle): at most policy.retry_reserve_solves typical
        solves, so the slot is soon free for the queue again."""
        best_t = best_s()
        busy = {job.entry.order for job in flying.values()}
        for key in [key for key, (b, _) in open_.items() if b >= best_t * (1 - policy.proof_tol) and key not in busy]:
            del open_[key]
        remaining = limit - (time.perf_counter() - t0)
        todo = [x for key, x in open_.items() if key in retry and key not in busy and x[0] < best_t * keep]
        if not (todo and len(flying) < slots and remaining >= policy.retry_min_s):
            return False
        # the fewest tries first, then the least bound: each open candidate gets its turn
        bound, e = min(todo, key=lambda x: (x[1].order not in resume, tries.get(x[1].order, 0), x[0], x[1].order))
        resumed = e.order in resume  # a first solve stopped by `preempt`: not a try
        resume.discard(e.order)
        if not resumed:
            tries[e.order] = tries.get(e.order, 0) + 1
        retry.discard(e.order)
        table = tables.get(e.candidate)
        job = prepare(e._replace(bound_s=bound), stage_problem(prob, e.candidate, table), table)
        if job is not None:
            job = job._replace(is_retry=not resumed)
            # a share of the time left, least bound first: one hard candidate does not take
            # the time the others could be proven in, and those left open at the end have
            # the largest bounds (the least gap)
            remaining = limit - (time.perf_counter() - t0)
            share = max(policy.retry_min_s, policy.retry_shares * workers * remaining / len(todo),
                        remaining - policy.retry_reserve_solves * typical_solve_s() * (len(todo) - 1) / workers)
            if resumed:
                share = first_solve_s
            elif early:
                cap_s = max(policy.retry_min_s, policy.retry_reserve_solves * typical_solve_s())
                if stop_share < 1 and found and found[0].candidate == e.candidate:
                    cap_s = max(cap_s, policy.incumbent_retry_share * remaining)
                share = min(share, cap_s)
            submit(job, min(remaining, share))
        return True

    # the pool is shut down however the search ends (a solve still running ends within its
    # time limit)
    with executor:
        for phase, gap in enumerate(phase_gaps):
            if phase:
                # the next phase (policy.staged_gap): its keep and cap, and a retry of every candidate
                # the last one left open below the best plan (set aside by the bounds or its
                # hint within the last gap, or cut off by the last cap)
                keep, stop_share = 1 - max(policy.proof_tol, gap), 1 - gap
                retry.update(key for key, (b, _) in open_.items() if b < best_s() * keep)
            last_phase = phase == len(phase_gaps) - 1
            # --- best-first
            while queue:
                harvest(block=False)
                if retry and len(flying) < loop_workers:
                    start_retry(loop_workers, early=True)
                if progress is not None:
                    report(line)
                e = queue[0]
                # prune against the best plan: alternatives are the runners-up among what was solved
                best_t = found[0].estimate.prediction.step_time_s if found else math.inf
                if e.bound_s >= best_t * keep:
                    if last_phase:  # otherwise the next phase goes on from here
                        set_aside(e.bound_s)  # the least bound of what is left
                        _count_left(stats, queue)
                    break
                out_of_time = time.perf_counter() - t0 > limit
                if out_of_time and found:
                    stats.timed_out = True
                    if not rescue:
                        stats.lower_bound_s = min(stats.lower_bound_s, e.bound_s)
                    break
                if out_of_time and not rescue:
                    rescue = True
                    stats.timed_out = True  # the status is FEASIBLE from here on
                    stats.lower_bound_s = min(stats.lower_bound_s, min(x.bound_s for x in queue))
                    queue[:] = [x._replace(bound_s=_fit_key(x.candidate)) for x in queue]
                    heapq.heapify(queue)
                    continue
                now = time.perf_counter()
                if dive_due(now):
                    dive()
                    dive_s += time.perf_counter() - now
                    continue
                heapq.heappop(queue)
                if e.stage == "group":
                    stats.groups_expanded += 1
                    expand(e)
                    continue
                queued -= 1
                c = e.candidate
                table = tables.get(c)
                p = stage_problem(prob, c, table)
                if out_of_time:
                    # nothing found yet: the most sharded candidates' greedy partitions until one fits
                    hint = seams.best_hint(p)
                    if hint is not None:
                        incumbent.record(c, table, hint[0], hint[1], STATUS_FEASIBLE)
                        optimal_all = False
                elif e.stage == "base_bound":
                    refined = refine(e, p, table, best_t)
                    if refined is None:
                        stats.pruned_memory += 1
                    else:
                        heapq.heappush(queue, refined)
                        if refined.order not in dived:
                            heapq.heappush(pool, refined)
                        queued += 1
                else:
                    # while the slots are taken, a candidate is deferred rather than waited for: this
                    # thread goes on bounding the queue, and the retries solve it
                    job = prepare(e, p, table, defer=True, busy=len(flying) >= loop_workers)
                    if job is not None:
                        while len(flying) >= loop_workers:  # no hint and no plan yet: wait for a slot
                            harvest(block=True)
                        remaining = max(policy.min_solve_s, limit - (time.perf_counter() - t0))
                        submit(job, min(remaining, first_solve_s))

            # --- retry what was solved without proof, most promising first, with the time left;
            # a candidate whose lower bound reaches the best plan needs no proof. Up to
            # policy.solve_workers CP-SAT solves run at once (CP-SAT releases the GIL; each has one
            # worker): the bounds and hints of the next are computed while they run, and each
            # finished solve is recorded, in this thread, before the next starts.
            while not stats.timed_out and (open_ or flying):
                if start_retry(workers):
                    continue
                if not flying:
                    break
                harvest(block=True)
            if stats.timed_out:
                break
        while flying:  # out of time: the solves still running end within their time limits
            harvest(block=True)
    best_t = best_s()
    for b in [b for b, _ in open_.values()] + [aside]:
        if b < best_t * (1 - policy.proof_tol):
            optimal_all = False
            stats.lower_bound_s = min(stats.lower_bound_s, b)

    best_t = best_s()
    if not monotone_ok:
        stats.lower_bound_s = 0.0  # the group bounds are not proven: no gap can be claimed
    status = STATUS_OPTIMAL if found and optimal_all and monotone_ok and not stats.timed_out else STATUS_FEASIBLE
    gap = 0.0
    if found and status == STATUS_FEASIBLE and math.isfinite(stats.lower_bound_s):
        gap = max(0.0, (best_t - min(stats.lower_bound_s, best_t)) / best_t)
    stats.monotone_ok = monotone_ok
    stats.solve_time_s = time.perf_counter() - t0
    return SearchResult(found, stats, status, gap)


class _Job(NamedTuple):
    """A CP-SAT solve of one candidate, prepared (search.prepare) and not yet run."""

    entry: _Entry
    problem: StageProblem
    table: LayerTable
    hint: tuple[list[int], list[int]] | None
    stop_at_s: float | None
    is_retry: bool = False  # started by start_retry, not by the best-first loop
    cap_share: float = 1.0  # stop_at_s / the best plan's time when it was capped (search.preempt)


def solve_workers(policy: SearchPolicy) -> int:
    """CP-SAT solves run at once (the retries; the best-first loop one fewer): the CPUs this
    process may use, at most policy.solve_workers."""
    return max(1, min(policy.solve_workers, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _fit_key(c: Candidate | DegreeGroup) -> float:
    """Rescue order once the deadline passed with no plan (smallest first): the most model
    parallelism first, since tp, pp, cp, ep and etp each shard some of the model states a
    GPU holds; among a group's candidates full recomputation, more ZeRO sharding and the
    smaller micro-batch first (the least activation and state memory)."""
    split = float(c.tp * c.pp * c.cp * c.ep * c.etp)
    if isinstance(c, DegreeGroup):
        return -split
    return -(split + 0.5 * (c.recompute == RECOMPUTE_FULL) + 0.1 * c.zero) + 1e-4 * c.micro_batch_size


def _count_left(stats: SearchStats, queue: list[_Entry]) -> None:
    """Everything still queued is pruned by its bound (>= the best plan's time)."""
    groups = sum(e.stage == "group" for e in queue)
    stats.pruned_groups += groups
    stats.pruned_time += len(queue) - groups
