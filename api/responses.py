"""Response models of the REST API that are not the planner's own types (the Plan,
CheckResult and Estimate come from planner.plan and cost_model.specs.results)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    error: ErrorDetail


class PlanSummary(BaseModel):
    id: str
    request_hash: str
    status: str
    created_at: float = Field(description="seconds since the epoch")


class PlanList(BaseModel):
    items: list[PlanSummary]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null on the last")
    total: int


class ProfileOut(BaseModel):
    # GET returns the whole stored profile beside these keys
    model_config = ConfigDict(extra="allow")
    id: str
    device: str
    schema_version: int
    created_at: float = Field(description="seconds since the epoch")


class Health(BaseModel):
    status: str
    database: str
    planner: bool = Field(description="the planner answers plans (always true: it installs with the service)")
    queue_depth: int = Field(description="admitted solves waiting for a worker")
    busy_workers: int = Field(0, description="worker processes running a solve now")
    workers: int = Field(0, description="worker processes of the pool (or, with a broker, this replica's admitted "
                         "solves' limit over the queue)")
    queue_capacity: int = Field(0, description="solves admitted at once (running + waiting); beyond it: 429")
