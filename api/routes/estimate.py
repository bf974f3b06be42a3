"""/v1/estimate (one given configuration, no search) and /v1/check (the CI gate)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool

from cost_model.specs.errors import SpecError
from cost_model.specs.results import Estimate
from planner.plan import CheckResult
from planner.request.schema import CheckRequest, EstimateRequest
from planner.service import check as check_request
from planner.service import estimate as estimate_request

from ..deps import MetricsDep, PoolDep, SettingsDep, StoreDep
from ._common import (
    COMMON_ERRORS,
    SOLVE_ERRORS,
    evaluation_failed,
    load_profile,
    solve,
    time_limit,
    v1_router,
)

router = v1_router("estimate")


@router.post("/estimate", response_model=Estimate, responses=COMMON_ERRORS)
async def estimate(body: EstimateRequest, store: StoreDep) -> Estimate:
    """Predicted step time and memory of one fully given configuration (no search)."""
    profile = await load_profile(store, body)
    try:
        return await run_in_threadpool(estimate_request, body, profile)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise evaluation_failed(exc, "cost model") from None


@router.post("/check", response_model=CheckResult, responses={**COMMON_ERRORS, **SOLVE_ERRORS})
async def check(body: CheckRequest, store: StoreDep, pool: PoolDep, settings: SettingsDep,
                metrics: MetricsDep) -> CheckResult:
    """CI gate: does this configuration fit, and is it within `max_slowdown` of the best plan?"""
    profile = await load_profile(store, body)
    limit = time_limit(settings, body)
    return await solve(pool, settings, metrics, _run_check, body, profile, limit, limit_s=limit, kind="check")


def _run_check(req: CheckRequest, profile, limit_s: float) -> CheckResult:
    return check_request(req, profile=profile, time_limit_s=limit_s)
