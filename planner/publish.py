"""The best plan so far, handed out while the search runs: a search calls `offer` with its
state each time its best plan changes (cheap: a copy of its plans and counters), and a thread
of its own turns the latest offer into a finished answer (`build`: the plan with its reasons,
economics and launch artifacts) and gives it to `sink`, so that whoever stops the search from
outside (its process killed past its run limit) still has that answer. Offers that come while
one is being built are replaced by the newest; at most one build per `every_s`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

S = TypeVar("S")
A = TypeVar("A")

log = logging.getLogger("planner.publish")

# the least time between two builds: each takes the search's interpreter for a while (the
# launch emitters), and a search improves its best plan in bursts
PUBLISH_EVERY_S = 0.5


class LatestPublisher(Generic[S, A]):
    """A context manager: the thread runs from `__enter__` until `__exit__`, which stops it
    without waiting: an offer still pending or being built is dropped (the search's own answer
    supersedes it), and nothing reaches the sink after `__exit__`."""

    def __init__(self, build: Callable[[S], A], sink: Callable[[A], None], every_s: float = PUBLISH_EVERY_S):
        self.build, self.sink, self.every_s = build, sink, every_s
        self._latest: S | None = None
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="planner-publish", daemon=True)
        self.published = 0  # answers given to the sink

    def offer(self, state: S) -> None:
        with self._cond:
            self._latest = state
            self._cond.notify()

    def __enter__(self) -> LatestPublisher[S, A]:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _loop(self) -> None:
        last = -self.every_s
        while True:
            with self._cond:
                while self._latest is None and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                # newer offers replace the latest while it waits for its turn
                while not self._stopped and (wait_s := last + self.every_s - time.perf_counter()) > 0:
                    self._cond.wait(wait_s)
                if self._stopped:
                    return
                state, self._latest = self._latest, None
            last = time.perf_counter()
            try:
                answer = self.build(state)
                with self._cond:  # under the lock: __exit__ ends the handing out at once
                    if self._stopped:
                        return
                    self.sink(answer)
                    self.published += 1
            except Exception:  # noqa: BLE001 - a failed build loses one early answer, never the search
                log.warning("could not publish the best plan so far", exc_info=True)
