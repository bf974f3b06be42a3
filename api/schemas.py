"""Request and response models of the REST API. The request models are cost_model/request.py's
(DESIGN.md "Request"); the physics checks stay in cost_model/validate.py. Response models
document the shape and leave room (extra keys allowed) for fields the planner adds."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The request models are the one request schema of cost_model/request.py, re-exported under
# the names the routes use: REST, the CLI and the cost model validate with the same classes.
from cost_model.request import (  # noqa: F401 - re-exports
    CheckRequest,
    EstimateRequest,
    PlanRequest,
)
from cost_model.request import Cluster as ClusterIn  # noqa: F401
from cost_model.request import Layer as LayerIn  # noqa: F401
from cost_model.request import Model as ModelIn  # noqa: F401
from cost_model.request import MoE as MoEIn  # noqa: F401
from cost_model.request import Parallelism as ParallelismIn  # noqa: F401
from cost_model.request import Search as SearchIn  # noqa: F401
from cost_model.request import Training as TrainingIn  # noqa: F401
from cost_model.request import Transformer as TransformerIn  # noqa: F401


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class ProfileIn(BaseModel):
    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False,
        json_schema_extra={"examples": [{"schema_version": 1, "device": "a100-80gb", "source": "planner profile",
                                         "layers": [{"kind": "block", "tp": 1, "micro_batch_size": 1, "seq_length": 2048,
                                                     "fwd_s": 0.004, "bwd_s": 0.008, "activation_bytes": 3.0e8}],
                                         "comm": [], "gemm": []}]},
    )
    schema_version: int = Field(ge=1, le=1000)
    device: str = Field(max_length=200, description="catalog name the numbers describe")


# ---- responses

class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    error: ErrorDetail


class BreakdownOut(_Out):
    compute_s: float
    recompute_s: float
    bubble_s: float
    tp_comm_s: float
    cp_comm_s: float
    dp_comm_s: float
    pp_comm_s: float
    ep_comm_s: float
    optimizer_s: float


class MemoryOut(_Out):
    peak_gib: float
    capacity_gib: float
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    other_gib: float


class PredictionOut(_Out):
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    tflops_per_gpu: float
    breakdown: BreakdownOut
    memory: MemoryOut


class StageOut(_Out):
    index: int
    layers: list[int]
    recompute_layers: int
    memory_gib: float
    time_ms: float


class EstimateOut(_Out):
    prediction: PredictionOut
    stages: list[StageOut]
    fits: bool


class PlanOut(_Out):
    id: str
    status: str = Field(description="optimal | feasible")
    request_hash: str
    parallelism: dict[str, Any]
    stages: list[dict[str, Any]]
    prediction: dict[str, Any]
    launch: dict[str, Any]


class PlanSummary(BaseModel):
    id: str
    request_hash: str
    status: str
    created_at: float = Field(description="seconds since the epoch")


class PlanList(BaseModel):
    items: list[PlanSummary]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null on the last")
    total: int


class CheckOut(_Out):
    ok: bool
    fits: bool
    slowdown: float | None
    estimate: dict[str, Any] | None
    best: dict[str, Any] | None
    reasons: list[str]


class ProfileOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    device: str
    schema_version: int
    created_at: float


class Health(BaseModel):
    status: str
    database: str
    planner: bool
    queue_depth: int
