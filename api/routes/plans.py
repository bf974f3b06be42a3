"""/v1/plans: create (search, or the stored plan of an identical request), get, list."""

from __future__ import annotations

import json
import time
from typing import Annotated, NamedTuple

from fastapi import Query, Request, Response
from starlette.concurrency import run_in_threadpool

from cost_model.specs.errors import SpecError
from planner import report
from planner.hashing import request_hash
from planner.ids import new_plan_id
from planner.plan import CompactPlan, Plan, PlanLinks
from planner.plan import compact as compact_doc
from planner.request.schema import PlanRequest
from planner.service import plan as plan_request

from ..dedupe import request_lock
from ..deps import InFlightDep, MetricsDep, PoolDep, SettingsDep, StoreDep
from ..errors import ApiError
from ..metrics import Metrics
from ..responses import PlanList
from ..settings import Settings
from ..store import Store, StoredPlan, decode_cursor, now_us
from ..worker import (
    KILL_AFTER_S,
    SolverPool,
    SolveTimeout,
    Timing,
    best_so_far_sink,
    search_limit_s,
)
from ._common import (
    CLIENT_GONE,
    COMMON_ERRORS,
    SOLVE_ERRORS,
    admitted,
    err,
    load_profile,
    non_finite,
    solve_timed,
    solve_wait_s,
    time_limit,
    unless_disconnected,
    v1_router,
)

router = v1_router("plans")
JSON = "application/json"


def plan_links(plan_id: str) -> PlanLinks:
    """The routes that serve a stored plan (this module's GET and api/routes/web.py's)."""
    base = f"/v1/plans/{plan_id}"
    return PlanLinks(plan=base, compact=f"{base}?compact=true", report=f"{base}/report.html",
                     pictures={name: f"{base}/{name}.svg" for name in report.PICTURES})


def _answer(body_json: str, plan_id: str, compact_form: bool) -> str:
    """The stored text as answered: as stored (byte for byte) unless the compact form is asked
    for, or the plan was stored before plans carried their links (then they are added)."""
    if not compact_form and '"links": {' in body_json:  # Plan.to_json's separators
        return body_json
    doc = json.loads(body_json)
    doc["links"] = plan_links(plan_id).model_dump(mode="json")
    return json.dumps(compact_doc(doc) if compact_form else doc, allow_nan=False)


def _stored(body_json: str, status: int, plan_id: str, cache: str | None = None, compact_form: bool = False,
            timing: Timing | None = None) -> Response:
    headers = {"Location": f"/v1/plans/{plan_id}"}
    if cache:
        headers["X-Plan-Cache"] = cache
    if timing is not None:  # the solve's queue wait and run time, apart (W3C Server-Timing, ms)
        headers["Server-Timing"] = timing.server_timing()
    return Response(_answer(body_json, plan_id, compact_form), status_code=status, media_type=JSON, headers=headers)


CompactQuery = Annotated[bool, Query(description="answer the compact form: the plan without its launch artifacts, "
                                     "rank groups, schedule timeline and stages (links.compact)")]
PLAN_ANSWER = Plan | CompactPlan  # the schema of a plan answer, full or compact


@router.post("/plans", status_code=201, response_model=PLAN_ANSWER,
             responses={201: {"description": "new plan (Location header names it)"},
                        200: {"model": PLAN_ANSWER,
                              "description": "the stored plan of an identical request (X-Plan-Cache: hit)"},
                        **COMMON_ERRORS, **SOLVE_ERRORS})
async def create_plan(
    request: Request,
    body: PlanRequest,
    store: StoreDep,
    pool: PoolDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    inflight: InFlightDep,
    refresh: Annotated[bool, Query(description="solve again even when an identical request was answered")] = False,
    compact: CompactQuery = False,
):
    """Best plan for a model on a cluster. Identical requests (same canonical JSON, ignoring
    `metadata`) return the stored plan unless `?refresh=true`; identical requests that arrive
    while one is being solved, on any replica, wait for that one solve and get its plan."""
    arrived = time.perf_counter()  # its answer is due its limit + KILL_AFTER_S from here (solve_timed)
    h = request_hash(body)
    # a refresh takes only a plan stored after it arrived; a plain request any stored plan
    since_us = now_us() if refresh else 0
    if not refresh:
        cached = await run_in_threadpool(store.find_plan_by_hash, h)
        if cached is not None:
            metrics.cache_hits.inc()
            return _stored(cached.body, 200, cached.id, "hit", compact)
    limit = time_limit(settings, body)

    async def answer() -> Answer:
        # the lock is held while solving, so its wait is bounded by the solve's own
        with admitted(pool, settings, metrics):
            async with request_lock(store, h, wait_limit_s=solve_wait_s(limit) + 5):
                found = await run_in_threadpool(store.find_plan_by_hash, h, since_us)  # another replica's solve
                if found is not None:
                    return Answer(found, solved=False)
                metrics.cache_misses.inc()
                plan, timing = await _solve_and_store(body, h, limit, store, pool, settings, metrics, arrived)
                return Answer(plan, solved=True, timing=timing)

    ran = await unless_disconnected(request, inflight.run(h, answer, accept=lambda a: a.plan.created_us >= since_us))
    if ran is None:  # the client went away; a solve nobody else waits for was cancelled with it
        return Response(status_code=CLIENT_GONE)
    got, led = ran
    if led and got.solved:
        return _stored(got.plan.body, 201, got.plan.id, "miss", compact, got.timing)
    metrics.cache_hits.inc()
    return _stored(got.plan.body, 200, got.plan.id, "hit", compact)


class Answer(NamedTuple):
    plan: StoredPlan
    solved: bool  # False: found in the store (another replica solved it)
    timing: Timing | None = None  # the solve's queue wait and run time, where this replica solved it


async def _solve_and_store(body: PlanRequest, h: str, limit: float, store: Store, pool: SolverPool,
                           settings: Settings, metrics: Metrics, arrived: float) -> tuple[StoredPlan, Timing]:
    profile = await load_profile(store, body)
    plan_id = new_plan_id()  # given to the planner so launch artifacts name the stored plan
    plan, timing = await solve_timed(pool, settings, metrics, _run_plan, body, profile, limit, plan_id,
                                     limit_s=limit, kind="plan", best_so_far=_killed_plan, arrived=arrived)
    plan = plan.model_copy(update={"id": plan_id, "request_hash": h, "links": plan_links(plan_id)})
    try:
        text = plan.to_json()  # the one serialisation: stored, answered, served on GET
    except ValueError as exc:
        raise non_finite(exc) from None  # refused before anything is stored
    created_us = now_us()
    # committed before the 201 goes out (and before the lock lets another replica look)
    await run_in_threadpool(store.put_plan, plan.id, h, plan.status, text, created_us)
    return StoredPlan(plan.id, text, created_us), timing


def _run_plan(req: PlanRequest, profile, limit_s: float, plan_id: str) -> Plan:
    """In a worker process: the plan, its best so far left for the caller as the search goes
    (api/worker.py best_so_far_sink), answered if the process is killed (_killed_plan)."""
    sink = best_so_far_sink()
    publish = None if sink is None else (lambda p: sink(p.to_json()))
    search_s = search_limit_s(limit_s)  # less by the time the request waited for this worker
    plan = plan_request(req, profile=profile, time_limit_s=search_s, plan_id=plan_id, publish=publish)
    if search_s < limit_s:
        plan.reasons.append(f"the search ran {search_s:.1f} s of the {limit_s:g} s limit: the request waited "
                            f"for a solver worker, and its answer is due within the limit + {KILL_AFTER_S:g} s "
                            "of its arrival")
    return plan


def _killed_plan(text: str, exc: SolveTimeout) -> Plan:
    """The best plan so far that a killed solve left (its search unfinished: timed out, with
    its gap), with a reason saying why it is the answer."""
    plan = Plan.model_validate_json(text)
    return plan.model_copy(update={"reasons": [*plan.reasons, f"answered with the best plan so far: {exc.reason}"]})


@router.get("/plans/{plan_id}", response_model=PLAN_ANSWER,
            responses={404: err("unknown plan id"), 422: COMMON_ERRORS[422]})
async def get_plan(plan_id: str, store: StoreDep, compact: CompactQuery = False):
    text = await run_in_threadpool(store.get_plan_json, plan_id)
    if text is None:
        raise ApiError(404, "not_found", f"no plan {plan_id!r}", {"id": plan_id})
    return Response(_answer(text, plan_id, compact), media_type=JSON)


@router.get("/plans", response_model=PlanList, responses={422: COMMON_ERRORS[422]})
async def list_plans(
    store: StoreDep,
    limit: Annotated[int | None, Query(ge=1, le=200, description="page size with cursor paging")] = None,
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page")] = None,
    page: Annotated[int | None, Query(ge=1, le=1_000_000, description="1-based page number (offset paging)")] = None,
    page_size: Annotated[int | None, Query(ge=1, le=200)] = None,
) -> PlanList:
    """Plans, newest first. Page with `?limit=&cursor=` (stable under inserts) or `?page=&page_size=`."""
    if cursor is not None and page is not None:
        raise SpecError("page", "give either cursor or page, not both")
    pos = None
    if cursor:
        try:
            pos = decode_cursor(cursor)
        except ValueError as exc:
            raise SpecError("cursor", str(exc)) from None
    size = page_size or limit or 20
    offset = (page - 1) * size if page else 0
    items, nxt, total = await run_in_threadpool(store.list_plans, size, pos, offset)
    return PlanList(items=items, next_cursor=nxt, total=total)
