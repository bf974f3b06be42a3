"""The reference search: every candidate, every partition (exhaustive.py); no bounds, no
pruning. The best-first search is checked against it (tests/planner)."""

from __future__ import annotations

import time

from cost_model.engines.support import get_engine
from cost_model.specs.results import GIB
from cost_model.specs.vocab import RECOMPUTE_FULL, STATUS_OPTIMAL
from cost_model.terms import memory
from planner import exhaustive as brute
from planner.bounds import memory_bound_bytes, offload_may_pay
from planner.search.incumbent import Incumbent
from planner.search.policy import SearchPolicy
from planner.search.results import Problem, Progress, Reporter, SearchResult, SearchStats
from planner.search.tables import LayerTables, search_capacity_bytes, stage_problem
from planner.space import Candidate, enumerate_candidates, offload_twin


class _Tally:
    """The reference search's progress: rank evaluations done, of at most `work`."""

    def __init__(self, report: Reporter, t0: float, work: int, cands: int, stats: SearchStats, best: Incumbent):
        self.report, self.t0, self.work, self.cands, self.stats, self.best = report, t0, work, cands, stats, best
        self.done = 0

    def line(self) -> str:
        best = f"{self.best.best_s():.4g} s" if self.best.found else "none yet"
        return (f"exhaustive: {self.done:,} of at most {self.work:,} rank evaluations, candidate "
                f"{self.stats.candidates:,} of {self.cands:,}, best step {best}, "
                f"{time.perf_counter() - self.t0:.1f} s elapsed")

    def tick(self, n: int) -> None:
        self.done += n
        self.report(self.line)


def search_exhaustive(prob: Problem, progress: Progress | None = None, *, progress_after_s: float | None = None,
                      progress_every_s: float | None = None, policy: SearchPolicy = SearchPolicy()) -> SearchResult:
    """Reference: every candidate, every partition (exhaustive.py); no bounds, no pruning.
    Counts its work first and refuses above exhaustive.MAX_EVALUATIONS (SpecError). The
    progress lines' timing: `policy`'s, or progress_after_s / progress_every_s where given."""
    t0 = time.perf_counter()
    stats = SearchStats(solver="exhaustive")
    tables = LayerTables(prob)
    cands = list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile,
                                      dominance=False))
    listed = set(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile))
    # the space's offloaded twins: of the candidates the search lists, where they do not fit
    # (bounds.offload_may_pay; queue.py expand makes the same)
    twins = _offload_twins(prob, tables, [c for c in cands if c in listed])
    cands += twins
    listed |= set(twins)
    L = prob.model.num_layers
    work = brute.check_size((L, c.pp * c.vpp, c.pp, c.recompute == RECOMPUTE_FULL,
                             get_engine(c.engine).empty_ends) for c in cands)
    best = Incumbent(prob, prob.space.top_k)
    # the top-k's lines are the non-dominated candidates' (space.dominant_options: a dominated
    # option is never faster nor lighter than the one that drops it, so it is no alternative);
    # the optimum is taken over every candidate, so a wrong dominance rule shows as a better best
    optimum = Incumbent(prob, 1)
    after_s = policy.progress_after_s if progress_after_s is None else progress_after_s
    every_s = policy.progress_every_s if progress_every_s is None else progress_every_s
    tally = _Tally(Reporter(progress, t0, after_s, every_s), t0, work, len(cands), stats, best)
    for c in cands:
        stats.candidates += 1
        table = tables.get(c)
        res = brute.best_partition(stage_problem(prob, c, table), tally.tick)
        if res is None:
            stats.infeasible += 1
            continue
        (best if c in listed else optimum).record(c, table, res[1], res[2], STATUS_OPTIMAL)
    if optimum.found and optimum.best_s() < best.best_s():
        f = optimum.found[0]
        best.record(f.candidate, tables.get(f.candidate), list(f.config.stage_layers),
                    list(f.config.recompute_layers or [0] * len(f.config.stage_layers)), STATUS_OPTIMAL)
    if not best.found:
        _least_memory(prob, tables, cands, stats)
    stats.solve_time_s = time.perf_counter() - t0
    return SearchResult(best.found, stats, STATUS_OPTIMAL, 0.0)


def _offload_twins(prob: Problem, tables: LayerTables, cands) -> list[Candidate]:
    """The offloaded twins the space holds for `cands` (bounds.offload_may_pay: where the
    candidate does not fit; the search makes them in queue.py expand)."""
    out = []
    for c in cands:
        cap = search_capacity_bytes(prob, c.engine)
        twin = offload_twin(prob.space, c, prob.training)
        m = prob.training.global_batch_size // (c.dp * c.micro_batch_size)
        if twin is not None and offload_may_pay(tables.base(c)[1], prob.training, c, m,
                                                memory.reserved_bytes(c, prob.model, prob.training), cap):
            out.append(twin)
    return out


def _least_memory(prob: Problem, tables: LayerTables, cands: list[Candidate], stats: SearchStats) -> None:
    for c in cands:
        m = prob.training.global_batch_size // (c.dp * c.micro_batch_size)
        reserved = memory.reserved_bytes(c, prob.model, prob.training)
        mem = memory_bound_bytes(tables.get_sums(c), c.recompute, c.schedule, c.pp, c.vpp, m, reserved) / GIB
        stats.note_memory(mem, c)
