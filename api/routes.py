"""HTTP routes. Handlers turn pydantic bodies into the request dicts that api/core.py and
planner/ take, so the CLI and the service answer the same question the same way."""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from cost_model.errors import SpecError
from planner.hashing import SEMANTIC_KEYS, request_hash
from planner.service import estimate as estimate_request

from .cli.catalog import gpus_table, models_table
from .errors import ApiError, spec_error_response
from .schemas import (
    CheckOut,
    CheckRequest,
    ErrorBody,
    EstimateOut,
    EstimateRequest,
    Health,
    PlanList,
    PlanOut,
    PlanRequest,
    ProfileIn,
    ProfileOut,
)
from .store import decode_cursor, now_us
from .worker import QueueFull, SolveTimeout

log = logging.getLogger("planner.api")

# what a plan depends on; anything else in the body (metadata, client labels) is left out of
# the request hash and of the solve
SEMANTIC = SEMANTIC_KEYS


def _err(desc: str) -> dict:
    return {"model": ErrorBody, "description": desc}


COMMON_ERRORS = {400: _err("body is not parseable JSON"),
                 401: _err("missing or wrong bearer token (when PLANNER_API_TOKEN is set)"),
                 413: _err("request body too large"),
                 422: _err("invalid input (details.field names it) or infeasible request")}
SOLVE_ERRORS = {429: _err("solver queue full; retry after Retry-After seconds"),
                503: _err("solve timed out or planner unavailable; retry after Retry-After seconds")}


def require_token(request: Request) -> None:
    token = request.app.state.settings.api_token
    if not token:
        return
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise ApiError(401, "unauthorized", "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


router = APIRouter()
v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses={401: COMMON_ERRORS[401]})


def new_id(prefix: str) -> str:
    # time-ordered (hex microseconds) + random: sortable like a ULID, unique across replicas
    return f"{prefix}_{now_us():013x}{secrets.token_hex(6)}"


def json_response(obj: Any, status: int = 200, headers: dict | None = None) -> Response:
    """JSON without NaN/Infinity (not JSON): a request whose numbers overflow the model is
    answered 422 rather than a broken body."""
    try:
        body = json.dumps(obj, allow_nan=False, default=_json_default)
    except ValueError as exc:
        raise ApiError(422, "non_finite", "the request drives the model out of numeric range (a prediction is not finite)",
                       {"reason": str(exc)}) from None
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    return str(o)


def _body(model) -> dict:
    return model.model_dump(mode="json", exclude_none=True)


def _planner():
    try:
        from planner.service import Infeasible, check, plan
    except ImportError as exc:
        raise ApiError(503, "planner_unavailable", f"the planner is not installed in this service: {exc}",
                       headers={"Retry-After": "60"}) from None
    return plan, check, Infeasible


def _run_plan(req: dict, profile, limit_s: float, plan_id: str) -> dict:
    # imported in the worker thread: the first import of ortools is slow and must not
    # stall the event loop
    plan_request, _, _ = _planner()
    return plan_request(req, profile=profile, time_limit_s=limit_s, plan_id=plan_id)


def _run_check(req: dict, max_slowdown: float, profile, limit_s: float) -> dict:
    _, check_request, _ = _planner()
    return check_request(req, max_slowdown=max_slowdown, profile=profile, time_limit_s=limit_s)


def _infeasible_class():
    try:
        from planner import Infeasible
    except ImportError:
        return None
    return Infeasible


async def _load_profile(request: Request, req: dict):
    pid = (req.get("cluster") or {}).get("profile_id")
    if not pid:
        return None
    found = await run_in_threadpool(request.app.state.store.get_profile, pid)
    if found is None:
        raise SpecError("cluster.profile_id", f"no profile {pid!r} (store one with POST /v1/profiles)")
    try:
        from cost_model.profile_schema import profile_from_dict
    except ImportError:
        raise ApiError(422, "profiles_not_supported", "profiles not supported by this service version",
                       {"field": "cluster.profile_id"}) from None
    try:
        return profile_from_dict(found[0])
    except SpecError as exc:
        raise SpecError("cluster.profile_id", f"stored profile is not usable: {exc}") from None


def _evaluation_failed(exc: Exception, what: str) -> ApiError:
    # Anything the computation raises for a request that passed validation is still the
    # client's input at fault (a corner of the model the validators don't cover): 422,
    # logged with its traceback so it can be turned into a proper validation rule.
    log.warning("%s failed on client input: %r", what, exc, exc_info=True)
    return ApiError(422, "unprocessable", f"the {what} could not evaluate this request: {type(exc).__name__}: {exc}",
                    {"exception": type(exc).__name__})


def _map_solver_errors(exc: Exception, what: str) -> Exception:
    infeasible = _infeasible_class()
    if isinstance(exc, SpecError | ApiError):
        return exc
    if infeasible is not None and isinstance(exc, infeasible):
        return ApiError(422, "infeasible", getattr(exc, "message", str(exc)), dict(getattr(exc, "details", {}) or {}))
    return _evaluation_failed(exc, what)


async def _solve(request: Request, fn, *args, limit_s: float, kind: str):
    app = request.app
    settings = app.state.settings
    retry = {"Retry-After": str(settings.retry_after_s)}
    start = time.perf_counter()
    try:
        # grace beyond the solver's own limit: enumeration and launch emitters run outside CP-SAT
        result = await app.state.pool.submit(fn, *args, timeout_s=limit_s * 1.5 + 5)
    except QueueFull:
        app.state.metrics.rejected.inc()
        raise ApiError(429, "queue_full", "the solver queue is full; retry later",
                       {"workers": settings.workers, "queue_size": settings.queue_size}, headers=retry) from None
    except SolveTimeout:
        raise ApiError(503, "solve_timeout", f"the solve did not finish within {limit_s:g} s", {"time_limit_s": limit_s},
                       headers=retry) from None
    except Exception as exc:  # noqa: BLE001 - mapped to 422 by kind
        raise _map_solver_errors(exc, "planner") from None
    finally:
        app.state.metrics.solve_time.labels(kind).observe(time.perf_counter() - start)
    return result


def _time_limit(settings, req: dict) -> float:
    asked = (req.get("search") or {}).get("time_limit_s")
    return min(settings.solve_time_limit_s, asked) if asked else settings.solve_time_limit_s


# ---------------------------------------------------------------- open routes

@router.get("/healthz", response_model=Health, tags=["service"], responses={503: _err("database unreachable")})
async def healthz(request: Request):
    db = request.app.state.store.engine.dialect.name
    try:
        await run_in_threadpool(request.app.state.store.ping)
    except Exception as exc:  # noqa: BLE001 - health reports, never raises
        return JSONResponse({"error": {"code": "unavailable", "message": f"database: {exc}", "details": {}}}, 503)
    try:
        import planner

        has_planner = hasattr(planner, "plan")
    except ImportError:
        has_planner = False
    return {"status": "ok", "database": db, "planner": has_planner, "queue_depth": request.app.state.pool.depth}


@router.get("/metrics", tags=["service"], response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}})
async def metrics(request: Request):
    m = request.app.state.metrics
    m.queue_depth.set(request.app.state.pool.depth)
    return Response(m.render(), media_type=m.content_type)


# ---------------------------------------------------------------- /v1

@v1.post("/plans", status_code=201, tags=["plans"],
         responses={201: {"model": PlanOut, "description": "new plan (Location header names it)"},
                    200: {"model": PlanOut, "description": "the stored plan of an identical request (X-Plan-Cache: hit)"},
                    **COMMON_ERRORS, **SOLVE_ERRORS})
async def create_plan(
    body: PlanRequest,
    request: Request,
    refresh: Annotated[bool, Query(description="solve again even when an identical request was answered")] = False,
):
    """Best plan for a model on a cluster. Identical requests (same canonical JSON, ignoring
    `metadata`) return the stored plan unless `?refresh=true`."""
    app = request.app
    req = _body(body)
    h = request_hash(req)
    store = app.state.store
    if not refresh:
        cached = await run_in_threadpool(store.find_plan_by_hash, h)
        if cached is not None:
            app.state.metrics.cache_hits.inc()
            return json_response(cached, 200, {"Location": f"/v1/plans/{cached['id']}", "X-Plan-Cache": "hit"})
    app.state.metrics.cache_misses.inc()
    profile = await _load_profile(request, req)
    limit = _time_limit(app.state.settings, req)
    solve_req = {k: req[k] for k in SEMANTIC if k in req}
    plan_id = new_id("p")  # given to the planner so launch artifacts name the stored plan
    plan = await _solve(request, _run_plan, solve_req, profile, limit, plan_id, limit_s=limit, kind="plan")
    plan = dict(plan)
    plan["id"] = plan_id
    plan["request_hash"] = h
    json_response(plan)  # refuses non-finite numbers before anything is stored
    await run_in_threadpool(store.put_plan, plan)  # committed before the 201 goes out
    return json_response(plan, 201, {"Location": f"/v1/plans/{plan['id']}", "X-Plan-Cache": "miss"})


@v1.get("/plans/{plan_id}", tags=["plans"],
        responses={200: {"model": PlanOut}, 404: _err("unknown plan id")})
async def get_plan(plan_id: str, request: Request):
    plan = await run_in_threadpool(request.app.state.store.get_plan, plan_id)
    if plan is None:
        raise ApiError(404, "not_found", f"no plan {plan_id!r}", {"id": plan_id})
    return json_response(plan)


@v1.get("/plans", tags=["plans"], response_model=PlanList, responses={422: COMMON_ERRORS[422]})
async def list_plans(
    request: Request,
    limit: Annotated[int | None, Query(ge=1, le=200, description="page size with cursor paging")] = None,
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page")] = None,
    page: Annotated[int | None, Query(ge=1, le=1_000_000, description="1-based page number (offset paging)")] = None,
    page_size: Annotated[int | None, Query(ge=1, le=200)] = None,
):
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
    items, nxt, total = await run_in_threadpool(request.app.state.store.list_plans, size, pos, offset)
    return {"items": items, "next_cursor": nxt, "total": total}


@v1.post("/estimate", tags=["estimate"], responses={200: {"model": EstimateOut}, **COMMON_ERRORS})
async def estimate(body: EstimateRequest, request: Request):
    """Predicted step time and memory of one fully given configuration (no search)."""
    req = _body(body)
    profile = await _load_profile(request, req)
    try:
        est = await run_in_threadpool(estimate_request, req, profile)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _evaluation_failed(exc, "cost model") from None
    return json_response(est.to_dict())


@v1.post("/check", tags=["estimate"], responses={200: {"model": CheckOut}, **COMMON_ERRORS, **SOLVE_ERRORS})
async def check(body: CheckRequest, request: Request):
    """CI gate: does this configuration fit, and is it within `max_slowdown` of the best plan?"""
    req = _body(body)
    max_slowdown = req.pop("max_slowdown", 0.10)
    profile = await _load_profile(request, req)
    limit = _time_limit(request.app.state.settings, req)
    result = await _solve(request, _run_check, req, max_slowdown, profile, limit, limit_s=limit, kind="check")
    return json_response(result)


@v1.post("/profiles", status_code=201, tags=["profiles"],
         responses={201: {"model": ProfileOut}, **COMMON_ERRORS})
async def create_profile(body: ProfileIn, request: Request):
    """Store a profile written by `planner profile`; reference it as `cluster.profile_id`."""
    d = body.model_dump(mode="json")
    try:
        from cost_model.profile_schema import profile_from_dict
    except ImportError:
        profile_from_dict = None
    if profile_from_dict is not None:
        try:
            profile_from_dict(d)  # reject what plans could not use, now rather than at plan time
        except SpecError as exc:
            return spec_error_response(exc)
        except Exception as exc:  # noqa: BLE001
            raise _evaluation_failed(exc, "profile reader") from None
    pid = new_id("prof")
    created = await run_in_threadpool(request.app.state.store.put_profile, pid, d["device"], d)
    out = {"id": pid, "device": d["device"], "schema_version": d["schema_version"], "created_at": created / 1e6}
    return json_response(out, 201, {"Location": f"/v1/profiles/{pid}"})


@v1.get("/profiles/{profile_id}", tags=["profiles"], responses={200: {"model": ProfileOut}, 404: _err("unknown profile id")})
async def get_profile(profile_id: str, request: Request):
    found = await run_in_threadpool(request.app.state.store.get_profile, profile_id)
    if found is None:
        raise ApiError(404, "not_found", f"no profile {profile_id!r}", {"id": profile_id})
    body, created = found
    return json_response({**body, "id": profile_id, "created_at": created / 1e6})


@v1.get("/models", tags=["catalog"])
async def models() -> list[dict[str, Any]]:
    """The built-in model presets (use `{"model": {"name": ...}}`)."""
    return models_table()


@v1.get("/gpus", tags=["catalog"])
async def gpus() -> list[dict[str, Any]]:
    """The GPU catalog (use `{"cluster": {"gpu": ...}}`)."""
    return gpus_table()


