"""`POST /v1/sweeps`: plan one model over a list of GPU counts or global batch sizes
(planner/sweep.py). The answer holds one point per value (degrees, step time, tokens/s,
MFU, memory, or why no plan), a text table, and the scaling picture as SVG when the
service has planner.report."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cost_model.errors import SpecError

from .errors import ApiError
from .routes import json_response, require_token
from .schemas import PlanRequest
from .store import now_us
from .worker import QueueFull, SolveTimeout

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], tags=["sweeps"])


class SweepAxis(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_gpus: list[int] | None = Field(None, min_length=1, max_length=32, description="GPU counts to plan for")
    global_batch_size: list[int] | None = Field(None, min_length=1, max_length=32, description="global batch sizes (sequences)")

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


def _run_sweep(req: dict, axis: str, values: list[int], limit_s: float) -> dict[str, Any]:
    from planner.sweep import sweep, table

    result = sweep(req, axis, values, None, limit_s)
    result["table"] = table(result)
    try:
        from planner.report import scaling_svg
    except ImportError as exc:
        result["svg"] = None
        result["svg_missing"] = f"pictures are not available in this service: {exc}"
    else:
        result["svg"] = scaling_svg(result)
    return result


@router.post("/sweeps", responses={422: {"description": "invalid input"}, 429: {"description": "solver queue full"},
                                   503: {"description": "sweep timed out"}})
async def create_sweep(body: SweepRequest, request: Request):
    """Plan the model at every value of one axis; points without a plan say why."""
    app = request.app
    settings = app.state.settings
    req = body.model_dump(mode="json", exclude_none=True)
    axis, values = body.sweep.axis
    req.pop("sweep", None)
    req.pop("metadata", None)
    asked = (req.get("search") or {}).get("time_limit_s")
    limit = min(settings.solve_time_limit_s, asked) if asked else settings.solve_time_limit_s
    retry = {"Retry-After": str(settings.retry_after_s)}
    budget = len(values) * (limit * 1.5 + 5)
    start = now_us()
    try:
        result = await app.state.pool.submit(_run_sweep, req, axis, values, limit, timeout_s=budget)
    except QueueFull:
        raise ApiError(429, "queue_full", "the solver queue is full; retry later", {}, headers=retry) from None
    except SolveTimeout:
        raise ApiError(503, "solve_timeout", f"the sweep did not finish within {budget:g} s", {"points": len(values)},
                       headers=retry) from None
    except SpecError:
        raise
    result["solve_time_s"] = round((now_us() - start) / 1e6, 3)
    return json_response(result)
