"""Bounded solver pool: solves run in worker processes (pebble's ProcessPool), never on the
event loop, and at most `workers + queue_size` are admitted at once, so an overloaded service
answers 429 at once instead of queueing without bound.

A process, not a thread, so that a solve can be stopped: the search stops itself at its hard
deadline (planner/deadline.py) and answers with what it has, and a solve that still runs
`run_limit_s` after it started (a loop no deadline reaches: building a CP-SAT model, the
launch emitters) has its process killed; pebble starts a fresh one in its place. A caller
that gives up (its `timeout_s`, or it is cancelled: the client went away) takes its work
with it: a queued solve is dropped before it starts, a running one's process is killed
(pebble kills a task's process on cancel; the queue is kept here, see SolverPool).
Queue wait and run time are measured apart (`Timing`). A solve may leave its best answer so
far in a file while it runs (`best_so_far_sink`; planner/publish.py writes there), and a solve
whose process is killed is answered with it (`SolveTimeout.best_so_far`) where there is one.

With a broker (api/queue.py) the same `submit` sends the solve to `planner worker` processes,
which run it in this pool on their machine."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import pickle
import shutil
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pebble import ProcessExpired, ProcessPool

from cost_model.specs.errors import SpecError

# the worker processes fork from a server that has already imported the planner (fast
# replacements after a kill) and share nothing with the service's threads and connections
PRELOAD = ["planner.service", "api.routes.sweeps"]


class QueueFull(Exception):
    pass


@dataclass
class Timing:
    """Seconds a solve waited for a worker and ran in it (wall clock)."""

    queue_wait_s: float = 0.0
    run_s: float = 0.0

    def server_timing(self) -> str:
        """The `Server-Timing` header value (W3C Server Timing; milliseconds)."""
        return f"queue;dur={self.queue_wait_s * 1e3:.1f}, solve;dur={self.run_s * 1e3:.1f}"


class SolveTimeout(Exception):
    """The solve did not answer in time. `killed`: its process was killed while running (past
    its run limit, or its caller's wait); otherwise it was dropped from the queue unstarted.
    `best_so_far`: the last answer a killed solve left (best_so_far_sink), as it wrote it."""

    def __init__(self, timing: Timing, killed: bool, reason: str, best_so_far: str | None = None):
        super().__init__(reason)
        self.timing = timing
        self.killed = killed
        self.reason = reason
        self.best_so_far = best_so_far

    def __reduce__(self):  # crosses the broker whole (api/queue.py)
        return (SolveTimeout, (self.timing, self.killed, self.reason, self.best_so_far))


class WorkerError(Exception):
    """An exception of the solve that does not survive pickling, as its type name and text."""

    def __init__(self, type_name: str, text: str):
        super().__init__(f"{type_name}: {text}")
        self.type_name = type_name
        self.text = text

    def __reduce__(self):
        return (WorkerError, (self.type_name, self.text))


def portable(exc: BaseException) -> BaseException:
    """`exc` in a form that crosses a process boundary (pickle): itself where it does,
    SpecError rebuilt from its fields, anything else as a WorkerError."""
    if isinstance(exc, SpecError):
        return _SpecErrorBox(exc.field, exc.message, exc.allowed, exc.suggestion)
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any failure to round-trip means: send its text
        return WorkerError(type(exc).__name__, str(exc))


class _SpecErrorBox(Exception):
    def __init__(self, field: str, message: str, allowed: Any, suggestion: str | None):
        super().__init__(field, message, allowed, suggestion)

    def unbox(self) -> SpecError:
        return SpecError(*self.args)


def unbox(exc: BaseException) -> BaseException:
    return exc.unbox() if isinstance(exc, _SpecErrorBox) else exc


# A solve may run this long past its search's time limit before its process is killed: the
# search stops itself at its hard deadline (the limit plus SearchPolicy.deadline_grace_s, at
# most 3 s) and the answer's launch artifacts follow; past this, something no deadline reaches runs.
KILL_AFTER_S = 5.0
# the least time limit a started solve's search is given (search_limit_s): enough for its
# rescue (the greedy partitions of the most sharded candidates) to find a plan that fits
MIN_SEARCH_S = 0.5

# in a worker process while a solve runs: the file its best answer so far goes to, and the
# wall-clock time its process is killed at (run_timed)
_best_so_far_path: str | None = None
_killed_at: float | None = None


def search_limit_s(limit_s: float) -> float:
    """In a worker process: the time limit a solve's search gets of `limit_s`, so that it stops
    itself KILL_AFTER_S before its process is killed: less by the time its request waited for
    a worker (the kill is at the request's arrival plus its limit plus KILL_AFTER_S),
    MIN_SEARCH_S at least (never more than the request asked for); `limit_s` outside a solve
    with a kill time."""
    if _killed_at is None:
        return limit_s
    return max(min(MIN_SEARCH_S, limit_s), min(limit_s, _killed_at - time.time() - KILL_AFTER_S))


def best_so_far_sink() -> Callable[[str], None] | None:
    """In a worker process, while a solve runs: a function that leaves the solve's best answer
    so far (text) where its caller reads it if the process is killed (replaced whole, never
    read half-written: written beside it, then renamed over it); None outside a solve."""
    path = _best_so_far_path
    if path is None:
        return None

    def write(text: str) -> None:
        part = f"{path}.part"
        with open(part, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(part, path)

    return write


def read_best_so_far(path: str) -> str | None:
    """The answer a killed solve left at `path`, if it left one."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def run_timed(fn: Callable[..., Any], args: tuple, best_so_far_path: str | None = None,
              killed_at: float | None = None) -> tuple[bool, Any, float, float]:
    """In the worker: (ok, result or portable exception, wall clock at start, run seconds);
    `best_so_far_path`: where the solve may leave its best answer so far (best_so_far_sink);
    `killed_at`: the wall-clock time its process is killed at (search_limit_s)."""
    global _best_so_far_path, _killed_at
    start_wall, t0 = time.time(), time.perf_counter()
    _best_so_far_path, _killed_at = best_so_far_path, killed_at
    try:
        return True, fn(*args), start_wall, time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - every error goes back to the caller
        return False, portable(exc), start_wall, time.perf_counter() - t0
    finally:
        _best_so_far_path, _killed_at = None, None


def answered(ok: bool, value: Any, timing: Timing) -> Any:
    """A worker's (ok, value) as the caller sees it: the value, or its exception raised with
    the solve's timing (a solve that answered with an error was timed too)."""
    if ok:
        return value
    exc = unbox(value)
    exc.solve_timing = timing
    raise exc


def _ready() -> bool:
    return True


def _process_context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


class Admission:
    """What both pools admit: `workers` solves at once plus `queue_size` waiting, then
    QueueFull (429); `reserve` holds a place for a request's preparation, `submit` is
    `submit_timed` without the timing. The pools say what is `full` and run `submit_timed`."""

    def __init__(self, workers: int, queue_size: int, on_depth: Callable[[int], None] | None = None):
        self.workers = workers
        self.capacity = workers + queue_size
        self._reserved = 0  # places held by reserve()
        self._on_depth = on_depth or (lambda _n: None)

    @property
    def full(self) -> bool:
        raise NotImplementedError

    @contextlib.contextmanager
    def reserve(self):
        """A place among the `capacity` admitted, held from before a request's preparation (its
        cross-replica lock: a database connection) to its end: QueueFull when they are taken,
        so a burst past the queue is refused before it holds anything."""
        if self._reserved >= self.capacity or self.full:
            raise QueueFull()
        self._reserved += 1
        try:
            yield
        finally:
            self._reserved -= 1

    async def submit_timed(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None,
                           run_limit_s: float | None = None) -> tuple[Any, Timing]:
        raise NotImplementedError

    async def submit(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None,
                     run_limit_s: float | None = None) -> Any:
        """submit_timed without the timing."""
        return (await self.submit_timed(fn, *args, timeout_s=timeout_s, run_limit_s=run_limit_s))[0]


class SolverPool(Admission):
    """At most `workers` solves run at once, each in a worker process; up to `queue_size` more
    wait here, in this process (not in pebble's pipe, where a cancelled task would still run:
    a solve is handed to a process only when one is free). Used from one event loop."""

    def __init__(self, workers: int, queue_size: int, on_depth: Callable[[int], None] | None = None,
                 max_tasks: int = 0):
        super().__init__(workers, queue_size, on_depth)
        # max_tasks: solves a process runs before pebble replaces it (0: never); 1 gives each
        # solve a fresh process, so what one solve's tables and caches took goes back at its end
        self._pool = ProcessPool(max_workers=workers, max_tasks=max_tasks, context=_process_context())
        # the solves' best answers so far, one file per solve while it runs (run_timed)
        self._spool = tempfile.mkdtemp(prefix="planner-best-so-far-")
        self._running = 0
        self._waiting: deque[asyncio.Future] = deque()

    @property
    def busy(self) -> int:
        """Solves running in a worker process."""
        return self._running

    @property
    def depth(self) -> int:
        """Admitted solves that wait for a worker (the queue depth)."""
        return sum(not w.done() for w in self._waiting)

    @property
    def full(self) -> bool:
        """No solve more would be admitted now."""
        return self._running + len(self._waiting) >= self.capacity

    async def _slot(self) -> None:
        """Wait for a free worker (FIFO); a caller cancelled while waiting leaves the queue."""
        if self._running < self.workers and not self._waiting:
            self._running += 1
            return
        if self.full:
            raise QueueFull()
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        self._on_depth(self.depth)
        try:
            await turn  # _free handed its slot over (counted in _running already)
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._free()  # handed a slot while leaving: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(turn)
            raise
        finally:
            self._on_depth(self.depth)

    def _free(self) -> None:
        """A solve ended: its slot goes to the longest waiting caller still there."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._running -= 1

    async def submit_timed(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None,
                           run_limit_s: float | None = None) -> tuple[Any, Timing]:
        """fn(*args) in a worker process, and how long it waited and ran. `timeout_s`: how long
        the caller waits in all, queue included (then its solve is dropped unstarted or its
        process killed); `run_limit_s`: how long the solve may run once started, at most what
        is left of `timeout_s` (then its process is killed; default `timeout_s`); the solve
        reads what it has with search_limit_s. Raises QueueFull, SolveTimeout, or the solve's
        own exception."""
        t0 = time.perf_counter()
        try:
            await asyncio.wait_for(self._slot(), timeout_s)
        except TimeoutError:
            raise SolveTimeout(Timing(time.perf_counter() - t0, 0.0), False,
                               f"still queued after {timeout_s:g} s; dropped, never started") from None
        queue_wait_s = time.perf_counter() - t0
        left_s = None if timeout_s is None else max(0.0, timeout_s - queue_wait_s)
        limit_s = run_limit_s if run_limit_s is not None else timeout_s
        if left_s is not None:
            limit_s = left_s if limit_s is None else min(limit_s, left_s)
        t1 = time.perf_counter()
        best_path = os.path.join(self._spool, f"{uuid.uuid4().hex}.txt")
        killed_at = None if limit_s is None else time.time() + limit_s
        fut = self._pool.schedule(run_timed, args=(fn, args, best_path, killed_at), timeout=limit_s)
        try:
            ok, value, _start_wall, run_s = await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()  # the caller went away: its process is killed
            raise
        except TimeoutError:
            # pebble's run limit: the solve ran limit_s and its process was killed
            raise SolveTimeout(Timing(queue_wait_s, time.perf_counter() - t1), True,
                               f"its process was killed after running {limit_s:g} s",
                               read_best_so_far(best_path)) from None
        except ProcessExpired as exc:
            raise SolveTimeout(Timing(queue_wait_s, time.perf_counter() - t1), True,
                               f"its worker process died (exit code {exc.exitcode})",
                               read_best_so_far(best_path)) from None
        finally:
            self._free()
            for leftover in (best_path, f"{best_path}.part"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
        timing = Timing(queue_wait_s, run_s)
        return answered(ok, value, timing), timing

    def warm(self, timeout_s: float = 120.0) -> None:
        """Start the worker processes and wait until each has run a task (they fork from a
        server that imports the planner first: seconds, once), so that the first solve is not
        charged with it and `submit` never starts the pool on the event loop."""
        futures = [self._pool.schedule(_ready) for _ in range(self.workers)]
        for fut in futures:
            fut.result(timeout=timeout_s)

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (pebble keeps them by pid; read for /healthz and tests)."""
        manager = getattr(getattr(self._pool, "_pool_manager", None), "worker_manager", None)
        return sorted(getattr(manager, "workers", {}) or {})

    def shutdown(self) -> None:
        self._pool.stop()
        self._pool.join(timeout=5)
        shutil.rmtree(self._spool, ignore_errors=True)
