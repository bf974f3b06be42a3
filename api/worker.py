"""Bounded solver pool: solves run in threads (CP-SAT releases the GIL while it searches),
never on the event loop, and at most `workers + queue_size` are admitted at once, so an
overloaded service answers 429 at once instead of queueing without bound."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class QueueFull(Exception):
    pass


class SolveTimeout(Exception):
    pass


class SolverPool:
    def __init__(self, workers: int, queue_size: int, on_depth: Callable[[int], None] | None = None):
        self.workers = workers
        self.capacity = workers + queue_size
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="solver")
        self._lock = threading.Lock()
        self._admitted = 0  # running + waiting; released when the thread finishes, not when the client gives up
        self._on_depth = on_depth or (lambda _n: None)

    @property
    def depth(self) -> int:
        """Admitted solves that wait for a worker (the queue depth)."""
        return max(0, self._admitted - self.workers)

    def _release(self, _fut) -> None:
        with self._lock:
            self._admitted -= 1
            n = self._admitted
        self._on_depth(max(0, n - self.workers))

    async def submit(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        with self._lock:
            if self._admitted >= self.capacity:
                raise QueueFull()
            self._admitted += 1
            n = self._admitted
        self._on_depth(max(0, n - self.workers))
        fut = self._executor.submit(fn, *args)
        fut.add_done_callback(self._release)
        try:
            # shield: a client disconnect must not cancel our bookkeeping; the thread runs on
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), timeout_s)
        except TimeoutError as exc:
            raise SolveTimeout() from exc

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
