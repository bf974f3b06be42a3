"""`POST /v1/sweeps`: plan one model over a list of GPU counts or global batch sizes
(planner/sweep.py). The answer holds one point per value (degrees, step time, tokens/s,
MFU, memory, or why no plan), a text table, and the scaling picture as SVG when the
service has planner.report."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cost_model.specs.errors import SpecError
from planner.report import scaling_svg
from planner.request.schema import PlanRequest
from planner.sweep import (
    MAX_POINTS,
    MIN_POINT_S,
    check_request,
    header,
    parse_axis,
    point,
    point_limit_s,
    skipped_point,
    table,
)

from ..errors import ApiError
from ..worker import QueueFull, SolveTimeout
from ._common import COMMON_ERRORS, SOLVE_ERRORS, solve_wait_s, time_limit, v1_router

router = v1_router("sweeps")

# the label of a sweep point's solve in planner_solve_duration_seconds{kind}
SOLVE_KIND = "sweep_point"
# beyond its deadline a sweep waits at most this long for the point in progress
# (enumeration and the launch emitters run outside the solver's own limit)
DEADLINE_GRACE_S = 5.0

Value = Annotated[int, Field(ge=1, le=1_000_000)]


class SweepAxis(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_gpus: list[Value] | None = Field(None, min_length=1, max_length=MAX_POINTS, description="GPU counts to plan for")
    global_batch_size: list[Value] | None = Field(None, min_length=1, max_length=MAX_POINTS,
                                                  description="global batch sizes (sequences)")

    @model_validator(mode="after")
    def _one_axis(self):
        if (self.num_gpus is None) == (self.global_batch_size is None):
            raise ValueError("give exactly one of num_gpus, global_batch_size")
        return self

    @property
    def axis(self) -> tuple[str, list[int]]:
        return ("num_gpus", self.num_gpus) if self.num_gpus is not None else ("global_batch_size", self.global_batch_size or [])


class SweepRequest(PlanRequest):
    """A plan request (its num_gpus or global_batch_size is replaced at each point) plus the values."""

    sweep: SweepAxis


def _run_point(req: PlanRequest, axis: str, value: int, limit_s: float) -> dict[str, Any]:
    return point(req, axis, value, None, limit_s)


def _finish(result: dict[str, Any]) -> dict[str, Any]:
    result["table"] = table(result)
    result["svg"] = scaling_svg(result)
    return result


@router.post("/sweeps", responses={200: {"description": "one point per value; points without a plan say why"},
                                   **COMMON_ERRORS, **SOLVE_ERRORS})
async def create_sweep(body: SweepRequest, request: Request):
    """Plan the model at every value of one axis. Each point is one solve on the solver pool
    with the plan time limit, capped by what is left of the sweep's deadline
    (`PLANNER_SWEEP_TIME_LIMIT_S`); points it leaves no time for are answered as skipped. The
    answer has the points, a text table and the scaling SVG."""
    app = request.app
    settings = app.state.settings
    metrics = app.state.metrics
    axis, values = body.sweep.axis
    values = parse_axis(axis, values)
    check_request(body, axis, values)
    limit = time_limit(settings, body)
    deadline_s = settings.sweep_time_limit_s
    retry = {"Retry-After": str(settings.retry_after_s)}
    start_s = time.monotonic()
    points = []
    for value in values:
        left_s = deadline_s - (time.monotonic() - start_s)
        if left_s < MIN_POINT_S:
            points.append(skipped_point(value, deadline_s))
            continue
        point_s = point_limit_s(limit, left_s)
        solve_start_s = time.perf_counter()
        admitted = True
        try:
            # waited for no longer than the deadline's grace, whatever the point's own grace
            wait_s = min(solve_wait_s(point_s), left_s + DEADLINE_GRACE_S)
            points.append(await app.state.pool.submit(_run_point, body, axis, value, point_s, timeout_s=wait_s))
        except QueueFull:
            admitted = False
            metrics.rejected.inc()
            raise ApiError(429, "queue_full", "the solver queue is full; retry later", {}, headers=retry) from None
        except SolveTimeout:
            points.append({"value": value, "ok": False, "error": f"the solve did not finish within {point_s:g} s"})
        except SpecError:
            raise
        except Exception as exc:  # noqa: BLE001 - the client's input at fault, as for plans
            raise ApiError(422, "unprocessable", f"the planner could not evaluate this request: {type(exc).__name__}: {exc}",
                           {"exception": type(exc).__name__}) from None
        finally:
            if admitted:  # counted with the plan solves, as every solve the pool ran
                metrics.solve_time.labels(SOLVE_KIND).observe(time.perf_counter() - solve_start_s)
    out = _finish({**header(body, axis, values), "points": points})
    out["solve_time_s"] = round(time.monotonic() - start_s, 3)
    out["deadline_s"] = deadline_s
    return out
