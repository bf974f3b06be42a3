"""What a search is given (Problem) and what it returns (SearchResult: the plans Found and
the SearchStats), and the throttled progress lines it reports while it runs."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from cost_model.specs.inputs import (
    CalibrationProfile,
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
)
from cost_model.specs.results import Estimate
from planner.space import Candidate, SearchSpace

# A progress sink: called with one human-readable line now and then during a long search.
Progress = Callable[[str], None]


class Reporter:
    """Throttled progress: calls `sink(line())` once `after_s` have passed since `t0`, and
    then at most once every `every_s`; `line` is only built when a line goes out."""

    def __init__(self, sink: Progress | None, t0: float, after_s: float, every_s: float):
        self.sink, self.every_s = sink, every_s
        self.next_at = t0 + after_s

    def __call__(self, line: Callable[[], str]) -> None:
        if self.sink is None:
            return
        now = time.perf_counter()
        if now >= self.next_at:
            self.next_at = now + self.every_s
            self.sink(line())


@dataclass
class Found:
    candidate: Candidate
    config: ParallelConfig
    estimate: Estimate
    status: str  # optimal | feasible (of the stage ILP)
    bound_s: float = 0.0  # the candidate's proven lower bound (its gap when feasible)


@dataclass
class SearchStats:
    # candidates enumerated: every candidate of the degree groups the search expanded (a
    # group pruned whole by its bound is counted in `pruned_groups`, its candidates never built)
    candidates: int = 0
    pruned_memory: int = 0
    pruned_time: int = 0
    ilp_solves: int = 0
    infeasible: int = 0
    solve_time_s: float = 0.0  # the whole search, wall clock
    ilp_time_s: float = 0.0  # of which in CP-SAT
    timed_out: bool = False
    lower_bound_s: float = math.inf  # least bound over what was not proven
    min_memory_gib: float = math.inf  # least memory lower bound seen, for infeasibility reports
    min_memory_config: Candidate | None = None
    solver: str = "cp-sat"
    groups: int = 0  # degree groups of the space (space.DegreeGroup)
    groups_expanded: int = 0  # of which expanded into candidates (the others pruned whole)
    pruned_groups: int = 0  # pruned by their group bound before any candidate was built
    monotone_ok: bool = True  # bounds.py's per-sample monotonicity held on every table built
    proven_by_bound: int = 0  # candidates whose hint the tight bound proved optimal (no CP-SAT)
    deferred: int = 0  # candidates whose solve waited for the queue to be done (Solves.prepare)
    dives: int = 0  # greedy plans recorded by dives (SearchPolicy.dive_after_share)

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
