"""The search: enumerate candidates (space.py), order them by an optimistic time bound,
prune by memory and time bounds (bounds.py) against the best plan so far, and solve the stage
partition of each survivor exactly (ilp.py; greedy.py as hint and fallback; exhaustive.py
for the reference search).

The modules: best_first.py (the search object and its loop), queue.py (the best-first queue:
degree groups, candidates and their bounds), solves.py (one candidate's solve, before and
after CP-SAT), scheduler.py (the CP-SAT solve threads, the retries and preemption), dive.py
(greedy plans to prune against), policy.py (the tuning constants), seams.py (the
collaborators a test may replace), context.py (what the parts share), results.py,
tables.py, hints.py, incumbent.py, and reference.py (the exhaustive reference search)."""

from __future__ import annotations

from collections.abc import Callable

from planner.search.best_first import BestFirstSearch
from planner.search.hints import best_hint
from planner.search.policy import SearchPolicy
from planner.search.reference import search_exhaustive
from planner.search.results import Found, Problem, Progress, SearchResult, SearchStats
from planner.search.scheduler import solve_workers
from planner.search.seams import Seams
from planner.search.tables import LayerTables, stage_problem, to_config

__all__ = [
    "BestFirstSearch",
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
    publish: Callable[[SearchResult], None] | None = None,
) -> SearchResult:
    """The best plans of `prob`: the best-first search (BestFirstSearch), or with
    `exhaustive` the reference search (search_exhaustive). `deadline_s`: the time limit
    (default the space's); `progress`: a sink for a progress line now and then, after
    `progress_after_s` and every `progress_every_s` at most (default the policy's); `policy`:
    the tuning constants; `seams`: the CP-SAT solve, the group candidates and the hint;
    `publish`: called with the search as it stands (BestFirstSearch.snapshot) each time its
    best plan changes (the reference search publishes nothing)."""
    if exhaustive:
        return search_exhaustive(prob, progress, progress_after_s=progress_after_s,
                                 progress_every_s=progress_every_s, policy=policy)
    return BestFirstSearch(prob, deadline_s, progress, progress_after_s=progress_after_s,
                           progress_every_s=progress_every_s, policy=policy, seams=seams, publish=publish).run()
