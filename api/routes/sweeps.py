"""`POST /v1/sweeps`: plan one model over a list of GPU counts or global batch sizes
(planner/sweep.py). The answer holds one point per value (degrees, step time, tokens/s,
MFU, memory, or why no plan), a text table, and the scaling picture as SVG when the
service has planner.report."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cost_model.specs.errors import SpecError
from planner.report import scaling_svg
from planner.request.schema import PlanRequest
from planner.sweep import MAX_POINTS, check_request, header, parse_axis, point, table

from ..errors import ApiError
from ..store import now_us
from ..worker import QueueFull, SolveTimeout
from ._common import COMMON_ERRORS, SOLVE_ERRORS, time_limit, v1_router

router = v1_router("sweeps")

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
    with the plan time limit; the answer has the points, a text table and the scaling SVG."""
    app = request.app
    settings = app.state.settings
    axis, values = body.sweep.axis
    values = parse_axis(axis, values)
    check_request(body, axis, values)
    limit = time_limit(settings, body)
    retry = {"Retry-After": str(settings.retry_after_s)}
    start = now_us()
    points = []
    for value in values:
        try:
            points.append(await app.state.pool.submit(_run_point, body, axis, value, limit, timeout_s=limit * 1.5 + 5))
        except QueueFull:
            raise ApiError(429, "queue_full", "the solver queue is full; retry later", {}, headers=retry) from None
        except SolveTimeout:
            points.append({"value": value, "ok": False, "error": f"the solve did not finish within {limit:g} s"})
        except SpecError:
            raise
        except Exception as exc:  # noqa: BLE001 - the client's input at fault, as for plans
            raise ApiError(422, "unprocessable", f"the planner could not evaluate this request: {type(exc).__name__}: {exc}",
                           {"exception": type(exc).__name__}) from None
    out = _finish({**header(body, axis, values), "points": points})
    out["solve_time_s"] = round((now_us() - start) / 1e6, 3)
    return out
