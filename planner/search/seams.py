"""The search's collaborators that a test may replace: the CP-SAT solve, the enumeration of
a degree group's candidates, and the float-model hint."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cost_model.pipeline.rank_costs import StageProblem
from planner import ilp, space
from planner.deadline import Deadline
from planner.search import hints
from planner.space import Candidate

Partition = tuple[list[int], list[int]]  # (stage layer counts, recomputed layers per stage)


@dataclass(frozen=True)
class Seams:
    """What the best-first search calls out to, the real functions by default.

    solve: ilp.solve's signature, `solve(p, time_limit_s, hint, lower_bound_s=, stop_at_s=,
        handle=)`: one candidate's stage partition by CP-SAT (run on the solve threads).
    group_candidates: space.group_candidates's signature, `(model, training, space, group,
        profile)`: the candidates of a degree group, when it reaches the front of the queue.
    best_hint: hints.best_hint's signature, `(StageProblem, Deadline) -> Partition | None`:
        a candidate's float-model partition, CP-SAT's hint and the fallback plan, by the
        solve's hard deadline."""

    solve: Callable[..., ilp.StageSolution] = ilp.solve
    group_candidates: Callable[..., Iterable[Candidate]] = space.group_candidates
    best_hint: Callable[[StageProblem, Deadline], Partition | None] = hints.best_hint
