"""What the route modules share: auth, error documentation, the finite-JSON response, the
solver-pool call and its error mapping, stored-profile loading."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from cost_model.hardware.profile_schema import profile_from_dict
from cost_model.specs.errors import SpecError
from planner.service import Infeasible

from ..errors import ApiError
from ..metrics import Metrics
from ..responses import ErrorBody
from ..settings import Settings
from ..store import Store
from ..worker import KILL_AFTER_S, QueueFull, SolverPool, SolveTimeout, Timing, WorkerError

log = logging.getLogger("planner.api")
T = TypeVar("T")


def err(desc: str) -> dict:
    return {"model": ErrorBody, "description": desc}


COMMON_ERRORS = {400: err("body is not parseable JSON, or nests a free-form object (metadata, hf_config) too deep"),
                 401: err("missing or wrong bearer token (when PLANNER_API_TOKEN is set)"),
                 413: err("request body too large"),
                 422: err("invalid input (details.field names it) or infeasible request")}
SOLVE_ERRORS = {429: err("solver queue full; retry after Retry-After seconds"),
                503: err("no answer in time: dropped from the queue unstarted, or its process killed past its "
                         "limit (details: killed, queue_wait_s, run_s); retry after Retry-After seconds")}


def non_finite(exc: ValueError) -> ApiError:
    return ApiError(422, "non_finite", "the request drives the model out of numeric range (a prediction is not finite)",
                    {"reason": str(exc)})


class FiniteJSONResponse(JSONResponse):
    """JSON without NaN/Infinity (not JSON): a request whose numbers overflow the model is
    answered 422 rather than with a broken body."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()
        except ValueError as exc:
            raise non_finite(exc) from None


def require_token(request: Request) -> None:
    token = request.app.state.settings.api_token
    if not token:
        return
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise ApiError(401, "unauthorized", "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


async def load_profile(store: Store, req: BaseModel):
    """The stored profile a validated request names (cluster.profile_id), or None."""
    pid = req.cluster.profile_id
    if not pid:
        return None
    found = await run_in_threadpool(store.get_profile, pid)
    if found is None:
        raise SpecError("cluster.profile_id", f"no profile {pid!r} (store one with POST /v1/profiles)")
    try:
        return profile_from_dict(found[0])
    except SpecError as exc:
        raise SpecError("cluster.profile_id", f"stored profile is not usable: {exc}") from None


def evaluation_failed(exc: Exception, what: str) -> ApiError:
    # Anything the computation raises for a request that passed validation is still the
    # client's input at fault (a corner of the model the validators don't cover): 422,
    # logged with its traceback so it can be turned into a proper validation rule.
    log.warning("%s failed on client input: %r", what, exc, exc_info=True)
    return ApiError(422, "unprocessable", f"the {what} could not evaluate this request: {type(exc).__name__}: {exc}",
                    {"exception": type(exc).__name__})


def _map_solver_error(exc: Exception, what: str) -> Exception:
    if isinstance(exc, SpecError | ApiError):
        return exc
    if isinstance(exc, WorkerError):  # raised in a worker process, its type kept by name
        return ApiError(422, "unprocessable", f"the {what} could not evaluate this request: {exc}",
                        {"exception": exc.type_name})
    if isinstance(exc, Infeasible):
        return ApiError(422, "infeasible", exc.message, dict(exc.details or {}))
    return evaluation_failed(exc, what)


def solve_wait_s(limit_s: float) -> float:
    """How long the service waits for a solve of time limit `limit_s` from the request's
    arrival, queue included: KILL_AFTER_S beyond the limit, as the search's hard deadline,
    enumeration and the launch emitters run past its soft limit. A solve still queued then is
    dropped; one started has its search's limit cut by its queue wait (search_limit_s) and its
    process killed then."""
    return limit_s + KILL_AFTER_S


def run_limit_s(limit_s: float) -> float:
    """How long a solve of time limit `limit_s` may run in its worker before it is killed."""
    return limit_s + KILL_AFTER_S


def queue_full(settings: Settings, metrics: Metrics) -> ApiError:
    metrics.rejected.inc()
    return ApiError(429, "queue_full", "the solver queue is full; retry later",
                    {"workers": settings.workers, "queue_size": settings.queue_size},
                    headers={"Retry-After": str(settings.retry_after_s)})


@contextlib.contextmanager
def admitted(pool: SolverPool, settings: Settings, metrics: Metrics):
    """A place in the solver pool held for a request's whole solve (SolverPool.reserve), taken
    before its cross-replica lock (a database connection held for the whole solve): a burst
    past the queue is answered 429 at once, and never holds the connection pool."""
    try:
        with pool.reserve():
            yield
    except QueueFull:
        raise queue_full(settings, metrics) from None


async def solve(pool: SolverPool, settings: Settings, metrics: Metrics, fn, *args, limit_s: float, kind: str) -> Any:
    """solve_timed's answer alone."""
    return (await solve_timed(pool, settings, metrics, fn, *args, limit_s=limit_s, kind=kind))[0]


async def solve_timed(pool: SolverPool, settings: Settings, metrics: Metrics, fn, *args, limit_s: float,
                      kind: str, best_so_far: Callable[[str, SolveTimeout], Any] | None = None,
                      arrived: float | None = None) -> tuple[Any, Timing]:
    """Run fn(*args) in the bounded solver pool: (its answer, its queue wait and run time),
    answered within solve_wait_s(limit_s) of `arrived` (the request's arrival, perf_counter;
    default now). Queue full -> 429; no answer in time (dropped from the queue, or its process
    killed) -> 503 with the reason and the timing, unless the killed solve left its best answer
    so far and `best_so_far` turns that text into the answer."""
    retry = {"Retry-After": str(settings.retry_after_s)}
    timing = None
    waited_s = 0.0 if arrived is None else time.perf_counter() - arrived
    try:
        value, timing = await pool.submit_timed(fn, *args, timeout_s=max(0.0, solve_wait_s(limit_s) - waited_s),
                                                run_limit_s=run_limit_s(limit_s))
        return value, timing
    except QueueFull:
        raise queue_full(settings, metrics) from None
    except SolveTimeout as exc:
        timing = exc.timing
        if exc.killed:
            metrics.killed.labels(kind).inc()
        if exc.best_so_far is not None and best_so_far is not None:
            return best_so_far(exc.best_so_far, exc), timing
        raise ApiError(503, "solve_timeout", f"the solve did not finish within {limit_s:g} s: {exc.reason}",
                       {"time_limit_s": limit_s, "killed": exc.killed, "queue_wait_s": round(timing.queue_wait_s, 3),
                        "run_s": round(timing.run_s, 3)}, headers=retry) from None
    except Exception as exc:  # noqa: BLE001 - mapped to 422 by kind
        timing = getattr(exc, "solve_timing", None)
        raise _map_solver_error(exc, "planner") from None
    finally:
        observe(metrics, kind, timing)


def observe(metrics: Metrics, kind: str, timing: Timing | None) -> None:
    """A solve's queue wait and run time, apart (none for one never admitted)."""
    if timing is not None:
        metrics.queue_wait.labels(kind).observe(timing.queue_wait_s)
        metrics.solve_time.labels(kind).observe(timing.run_s)


# how often a waiting request looks whether its client is still there
DISCONNECT_POLL_S = 0.25
# the status a request whose client went away is logged with (nginx's "client closed request")
CLIENT_GONE = 499


async def _until_disconnected(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """`work`'s answer, or None once the client has disconnected: `work` is then cancelled
    (with it a solve only this client waited for: api/dedupe.py, api/worker.py)."""
    job = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({job, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if job.done():
        return job.result()
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await job
    return None


def time_limit(settings: Settings, req: BaseModel) -> float:
    asked = req.search.time_limit_s if req.search is not None else None
    return min(settings.solve_time_limit_s, asked) if asked else settings.solve_time_limit_s


def v1_router(tag: str) -> APIRouter:
    """A resource's router: under /v1, behind the bearer token when one is set. The prefix is
    the router's own (joined into each route's path), so a route's template, as the metrics
    label it, is its full path."""
    return APIRouter(prefix="/v1", tags=[tag], dependencies=[Depends(require_token)],
                     responses={401: COMMON_ERRORS[401]}, default_response_class=FiniteJSONResponse)
