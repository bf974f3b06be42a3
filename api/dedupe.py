"""One solve per question: identical plan requests that arrive while one is being solved wait
for that solve instead of starting their own.

Two layers. Within a process, `InFlight` maps a request hash to the task that answers it;
later callers await the same task (its plan, or its error). Across replicas on PostgreSQL,
`request_lock` holds a session advisory lock keyed by the hash (api/store.py) around the
look-again-then-solve, so a replica that finds the lock taken polls until the holder has
stored its plan, then finds it in the store. On SQLite (one process per file) the
in-process map is the whole story."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

from .store import Store

log = logging.getLogger("planner.api")

T = TypeVar("T")

# how often a replica waiting for another replica's solve asks for the lock again
LOCK_POLL_S = 0.1


class InFlight:
    """request hash -> the task answering it. Lives on the process's event loop."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task] = {}
        self._waiters: dict[asyncio.Task, int] = {}  # callers awaiting each task

    def __len__(self) -> int:
        return len(self._tasks)

    async def run(self, key: str, make: Callable[[], Awaitable[T]], accept: Callable[[T], bool]) -> tuple[T, bool]:
        """(answer, led): the answer of the task in flight for `key` when `accept` takes it,
        else of a new task running `make()` (led=True). The task is shielded: a caller that is
        cancelled (its client went away) does not cancel the answer the others wait for; when
        the last caller of a task is cancelled, the task is cancelled too (its solve dropped
        from the queue, or its worker process killed: api/worker.py)."""
        while True:
            task = self._tasks.get(key)
            if task is None:
                task = asyncio.ensure_future(make())
                self._tasks[key] = task
                task.add_done_callback(lambda t, k=key: self._forget(k, t))
                return await self._wait(task), True
            answer = await self._wait(task)  # its error is every waiter's error
            if accept(answer):
                return answer, False
            # an answer older than this caller wants (a refresh that joined a cached lookup):
            # wait for, or start, the next one

    async def _wait(self, task: asyncio.Task) -> T:
        self._waiters[task] = self._waiters.get(task, 0) + 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self._waiters.get(task) == 1 and not task.done():
                task.cancel()  # nobody is left to take its answer
            raise
        finally:
            n = self._waiters.get(task, 1) - 1
            if n:
                self._waiters[task] = n
            else:
                self._waiters.pop(task, None)

    def _forget(self, key: str, task: asyncio.Task) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so a task whose callers all left logs nothing


@asynccontextmanager
async def request_lock(store: Store, request_hash: str, wait_limit_s: float):
    """Hold the cross-replica lock of `request_hash` (a no-op off PostgreSQL). Waits without
    blocking a thread; after `wait_limit_s` (a holder that hangs) it goes on without the lock:
    a duplicate solve is better than a request that never ends."""
    deadline = time.monotonic() + wait_limit_s
    lock = await run_in_threadpool(store.try_lock_request, request_hash)
    while lock is None and time.monotonic() < deadline:
        await asyncio.sleep(LOCK_POLL_S)
        lock = await run_in_threadpool(store.try_lock_request, request_hash)
    if lock is None:
        log.warning("request %s: lock still held after %.0f s; solving without it", request_hash[:12], wait_limit_s)
    try:
        yield
    finally:
        if lock is not None:
            await run_in_threadpool(lock.release)
