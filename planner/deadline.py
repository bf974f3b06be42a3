"""One solve's hard deadline, passed down to the loops whose work grows with the model's
blocks and the search's candidates (bounds, layer tables, candidate enumeration), so that no
single request runs long anywhere: each such loop calls `check()` now and then, and past the
deadline it raises DeadlineExceeded, which the search catches and answers with the best plan
it has (or a timed-out Infeasible when it has none).

The search's own time limit is soft (it stops queueing work at it, then records what it has);
the hard deadline sits a grace beyond it (SearchPolicy.deadline_grace), for the loops that
would otherwise outlast it (one memory bound of a 4,096-block model ran for minutes)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


class DeadlineExceeded(Exception):
    """The solve's hard deadline passed inside `where`."""

    def __init__(self, where: str, over_s: float):
        super().__init__(f"hard deadline passed in {where} ({over_s:.2f} s over)")
        self.where = where
        self.over_s = over_s


@dataclass(frozen=True)
class Deadline:
    """An instant on time.perf_counter's clock; `math.inf`: none."""

    at: float = math.inf

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.perf_counter() + seconds)

    def left_s(self) -> float:
        return self.at - time.perf_counter()

    def check(self, where: str) -> None:
        """Raise DeadlineExceeded when the deadline has passed."""
        if self.at != math.inf and (over := time.perf_counter() - self.at) > 0:
            raise DeadlineExceeded(where, over)


NO_DEADLINE = Deadline()
