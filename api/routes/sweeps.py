"""`POST /v1/sweeps`: plan one model over a list of GPU counts or global batch sizes, or over
GPU types x GPU counts to choose the cluster (planner/sweep.py). The answer holds one point
per grid point (degrees, step time, tokens/s, MFU, memory, time to train and cost, or why no
plan), the Pareto front of time to train vs cost, the point a deadline or budget chooses, a
text table, and the picture as SVG: the scaling picture for one numeric axis, cost vs time
(planner/report/cost_time.py) when the sweep prices its points."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cost_model.hardware.prices import GpuPrice
from cost_model.specs.errors import SpecError
from planner.report import cost_time_svg, scaling_svg
from planner.request.schema import MAX_USD_PER_GPU_H, PlanRequest
from planner.sweep import (
    GPU_AXIS,
    MAX_POINTS,
    MIN_POINT_S,
    Coords,
    check_grid,
    failed_point,
    finish,
    grid_coords,
    parse_axes,
    point,
    point_limit_s,
    skipped_point,
    table,
)

from ..errors import ApiError
from ..worker import QueueFull, SolveTimeout, search_limit_s
from ._common import (
    COMMON_ERRORS,
    SOLVE_ERRORS,
    observe,
    run_limit_s,
    solve_wait_s,
    time_limit,
    v1_router,
)

router = v1_router("sweeps")

# the label of a sweep point's solve in planner_solve_duration_seconds{kind}
SOLVE_KIND = "sweep_point"
# beyond its deadline a sweep waits at most this long for the point in progress
# (enumeration and the launch emitters run outside the solver's own limit)
DEADLINE_GRACE_S = 5.0

Value = Annotated[int, Field(ge=1, le=1_000_000)]
GpuName = Annotated[str, Field(min_length=1, max_length=64)]
Usd = Annotated[float, Field(gt=0, le=MAX_USD_PER_GPU_H)]
PRICES_SOURCE = "request: sweep.prices"


class SweepAxis(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: list[GpuName] | None = Field(None, min_length=1, max_length=MAX_POINTS,
                                      description="GPU types (catalog names, GET /v1/gpus) to plan for; with num_gpus "
                                      "a grid, GPU type outermost; needs training.total_tokens", examples=[["h100-sxm", "b200"]])
    num_gpus: list[Value] | None = Field(None, min_length=1, max_length=MAX_POINTS, description="GPU counts to plan for")
    global_batch_size: list[Value] | None = Field(None, min_length=1, max_length=MAX_POINTS,
                                                  description="global batch sizes (sequences)")
    deadline_days: float | None = Field(None, gt=0, le=36500, description="choose the cheapest point that trains "
                                        "within this many days (with budget_usd: the cheapest within both)")
    budget_usd: float | None = Field(None, gt=0, le=1e12, description="choose the fastest point that costs at most "
                                     "this (USD)")
    prices: dict[GpuName, Usd] | None = Field(None, max_length=64, description="USD per GPU-hour per GPU type (your "
                                              "contract prices); override the list-price table", examples=[{"mi300x": 3.5}])

    @model_validator(mode="after")
    def _axes(self):
        if self.num_gpus is not None and self.global_batch_size is not None:
            raise ValueError("give at most one of num_gpus, global_batch_size (with or without gpu)")
        if self.gpu is None and self.num_gpus is None and self.global_batch_size is None:
            raise ValueError("give gpu, num_gpus or global_batch_size (gpu with num_gpus: GPU types x counts)")
        return self

    @property
    def axes(self) -> dict[str, list]:
        return {a: v for a, v in (("gpu", self.gpu), ("num_gpus", self.num_gpus),
                                  ("global_batch_size", self.global_batch_size)) if v is not None}

    def gpu_prices(self) -> dict[str, GpuPrice] | None:
        return None if not self.prices else {g: GpuPrice(gpu=g, usd_per_gpu_h=float(v), source=PRICES_SOURCE)
                                             for g, v in self.prices.items()}


class SweepRequest(PlanRequest):
    """A plan request (its gpu, num_gpus or global_batch_size is replaced at each point) plus the grid."""

    sweep: SweepAxis


def _run_point(req: PlanRequest, coords: Coords, limit_s: float, prices: dict[str, GpuPrice] | None) -> dict[str, Any]:
    """One point on the solver pool: a top-level function of picklable arguments; its search
    stops before its process is killed, however long it waited for the worker."""
    return point(req, coords, None, search_limit_s(limit_s), prices)


def _finish(result: dict[str, Any], priced: bool) -> dict[str, Any]:
    result["table"] = table(result)
    result["svg"] = cost_time_svg(result) if priced else scaling_svg(result)
    return result


@router.post("/sweeps", responses={200: {"description": "one point per value; points without a plan say why"},
                                   **COMMON_ERRORS, **SOLVE_ERRORS})
async def create_sweep(body: SweepRequest, request: Request):
    """Plan the model at every point of the grid (GPU types x counts, or one axis). Each point
    is one solve on the solver pool (at most `PLANNER_WORKERS` of one sweep's at a time) with
    the plan time limit, capped by what is left of the sweep's deadline
    (`PLANNER_SWEEP_TIME_LIMIT_S`); points it leaves no time for are answered as skipped. The answer has the points, the time/cost front and the chosen point
    (sweep.deadline_days / sweep.budget_usd), a text table and the SVG."""
    app = request.app
    settings = app.state.settings
    metrics = app.state.metrics
    spec = body.sweep
    axes = parse_axes(spec.axes)
    check_grid(body, axes, spec.deadline_days, spec.budget_usd)
    prices = spec.gpu_prices()
    limit = time_limit(settings, body)
    deadline_s = settings.sweep_time_limit_s
    retry = {"Retry-After": str(settings.retry_after_s)}
    start_s = time.monotonic()
    # the points fan out over the pool, at most PLANNER_WORKERS of this sweep's at a time (the
    # rest of the queue stays for other requests); answered in grid order
    slots = asyncio.Semaphore(settings.workers)
    failed = asyncio.Event()  # one point's error answers the sweep: the points not started stay so

    async def one(coords: Coords) -> dict[str, Any]:
        async with slots:
            left_s = deadline_s - (time.monotonic() - start_s)
            if left_s < MIN_POINT_S or failed.is_set():
                return skipped_point(coords, deadline_s)
            point_s = point_limit_s(limit, left_s)
            timing = None  # counted with the plan solves (observe), as every solve the pool ran
            try:
                # waited for no longer than the deadline's grace, whatever the point's own grace
                wait_s = min(solve_wait_s(point_s), left_s + DEADLINE_GRACE_S)
                value, timing = await app.state.pool.submit_timed(_run_point, body, coords, point_s, prices,
                                                                  timeout_s=wait_s, run_limit_s=run_limit_s(point_s))
                return value
            except QueueFull:
                failed.set()
                metrics.rejected.inc()
                raise ApiError(429, "queue_full", "the solver queue is full; retry later", {}, headers=retry) from None
            except SolveTimeout as exc:
                timing = exc.timing
                if exc.killed:
                    metrics.killed.labels(SOLVE_KIND).inc()
                return failed_point(coords, f"the solve did not finish within {point_s:g} s")
            except SpecError as exc:
                timing = getattr(exc, "solve_timing", None)
                failed.set()
                raise
            except Exception as exc:  # noqa: BLE001 - the client's input at fault, as for plans
                timing = getattr(exc, "solve_timing", None)
                failed.set()
                raise ApiError(422, "unprocessable", f"the planner could not evaluate this request: {type(exc).__name__}: "
                               f"{exc}", {"exception": type(exc).__name__}) from None
            finally:
                observe(metrics, SOLVE_KIND, timing)

    points = list(await asyncio.gather(*(one(c) for c in grid_coords(axes))))
    priced = GPU_AXIS in axes or spec.deadline_days is not None or spec.budget_usd is not None
    out = _finish(finish(body, axes, points, spec.deadline_days, spec.budget_usd), priced)
    out["solve_time_s"] = round(time.monotonic() - start_s, 3)
    out["deadline_s"] = deadline_s
    return out
