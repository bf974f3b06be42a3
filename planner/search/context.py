"""What every part of the best-first search reads: the problem, the policy and seams, the
clock, the counters, the tables, the best plans, and the caps of the phase it is in."""

from __future__ import annotations

import time
from dataclasses import dataclass

from planner.deadline import Deadline
from planner.search.incumbent import Incumbent
from planner.search.policy import SearchPolicy
from planner.search.results import Problem, SearchStats
from planner.search.seams import Seams
from planner.search.tables import LayerTables


@dataclass
class Clock:
    """The search's start (perf_counter) and its time limit."""

    t0: float
    limit: float

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def remaining(self) -> float:
        return self.limit - (time.perf_counter() - self.t0)


class Caps:
    """How close to the best plan the search searches, phase by phase.

    A bound at or above `keep` x the best plan is not searched further (space.gap_limit), and a
    CP-SAT solve is capped at `stop_share` x the best plan (a capped solve proves far sooner).
    Below policy.staged_gap the search runs in two phases (`phase_gaps`): first with the keep
    and cap of a search at staged_gap, then at the gap asked for; `final_keep` and
    `final_stop_share` are the last phase's (a first solve is capped at the gap asked for)."""

    def __init__(self, gap_limit: float, policy: SearchPolicy):
        self.proof_tol = policy.proof_tol
        self.final_keep = 1 - max(policy.proof_tol, gap_limit)
        self.final_stop_share = 1 - gap_limit
        self.phase_gaps = [policy.staged_gap, gap_limit] if gap_limit < policy.staged_gap else [gap_limit]
        self.enter(self.phase_gaps[0])

    def enter(self, gap: float) -> None:
        """The keep and cap of a phase at `gap`."""
        self.keep, self.stop_share = 1 - max(self.proof_tol, gap), 1 - gap


@dataclass
class Context:
    """The parts of one best-first search that its named parts (queue, solves, scheduler,
    dives) share; built once by BestFirstSearch."""

    prob: Problem
    policy: SearchPolicy
    seams: Seams
    clock: Clock
    stats: SearchStats
    tables: LayerTables
    best: Incumbent
    caps: Caps
    deadline: Deadline  # the hard one, a grace past the clock's limit (planner/deadline.py)
