"""Request and response models of the REST API. The request models mirror DESIGN.md
"Request"; the bounds here are the coarse sanity limits of a service (a 10^30-GPU cluster
is a typo, not a plan), the physics checks stay in cost_model/validate.py. Response models
document the shape and leave room (extra keys allowed) for fields the planner adds."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BIG = 1 << 31  # bounds that keep arithmetic in range; real values are far below


class _In(BaseModel):
    # extra keys pass through to cost_model.parse (e.g. cluster.inter_node_latency_s)
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class MoEIn(_In):
    num_experts: int = Field(ge=1, le=65536)
    top_k: int = Field(ge=1, le=65536)
    ffn_hidden_size: int = Field(ge=1, le=BIG)
    layer_freq: int | None = Field(None, ge=1, le=1024)


class TransformerIn(_In):
    num_layers: int = Field(ge=1, le=4096)
    hidden_size: int = Field(ge=1, le=1 << 20)
    num_attention_heads: int = Field(ge=1, le=65536)
    num_kv_heads: int | None = Field(None, ge=1, le=65536)
    ffn_hidden_size: int | None = Field(None, ge=1, le=1 << 22)
    vocab_size: int | None = Field(None, ge=1, le=1 << 24)
    mlp: Literal["gelu", "swiglu"] | None = None
    tie_embeddings: bool | None = None
    moe: MoEIn | None = None


class LayerIn(_In):
    name: str | None = Field(None, max_length=200)
    fwd_flops: float = Field(ge=0, le=1e21)
    params: float = Field(ge=0, le=1e13)
    activation_bytes: float = Field(ge=0, le=1e13)
    output_bytes: float = Field(ge=0, le=1e13)


class ModelIn(_In):
    name: str | None = Field(None, max_length=200, description="preset name (GET /v1/models)")
    hf_config: dict[str, Any] | None = Field(None, description="a Hugging Face config.json")
    transformer: TransformerIn | None = None
    layers: list[LayerIn] | None = Field(None, max_length=4096)


class ClusterIn(_In):
    gpu: str = Field(max_length=100, description="GPU name (GET /v1/gpus)")
    num_gpus: int = Field(ge=1, le=1 << 20)
    gpus_per_node: int | None = Field(None, ge=1, le=1024)
    intra_node_gb_s: float | None = Field(None, gt=0, le=1e6, description="NVLink GB/s per GPU per direction")
    inter_node_gb_s: float | None = Field(None, gt=0, le=1e6, description="network GB/s per GPU per direction")
    profile_id: str | None = Field(None, max_length=64, description="a profile stored with POST /v1/profiles")


class TrainingIn(_In):
    global_batch_size: int = Field(ge=1, le=1 << 24, description="sequences per step")
    seq_length: int = Field(ge=1, le=1 << 24)
    dtype: Literal["bf16", "fp16", "fp8", "fp32"] | None = None
    optimizer: str | None = Field(None, max_length=32)


IntChoice = int | list[int]
StrChoice = str | list[str]


class SearchIn(_In):
    tp: IntChoice | None = None
    pp: IntChoice | None = None
    dp: IntChoice | None = None
    cp: IntChoice | None = None
    ep: IntChoice | None = None
    vpp: IntChoice | None = None
    micro_batch_size: IntChoice | None = None
    recompute: StrChoice | None = None
    zero: IntChoice | None = None
    schedule: StrChoice | None = None
    sequence_parallel: bool | list[bool] | None = None
    memory_headroom: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0, le=100)
    time_limit_s: float | None = Field(None, gt=0, le=3600, description="capped by PLANNER_SOLVE_TIME_LIMIT_S")
    targets: list[str] | None = Field(None, max_length=16)


class ParallelismIn(_In):
    dp: int | None = Field(None, ge=1, le=1 << 20)
    tp: int | None = Field(None, ge=1, le=1 << 20)
    pp: int | None = Field(None, ge=1, le=1 << 20)
    cp: int | None = Field(None, ge=1, le=1 << 20)
    ep: int | None = Field(None, ge=1, le=1 << 20)
    vpp: int | None = Field(None, ge=1, le=1024)
    micro_batch_size: int | None = Field(None, ge=1, le=1 << 24)
    recompute: Literal["none", "selective", "full"] | None = None
    sequence_parallel: bool | None = None
    zero: Literal[0, 1, 2, 3] | None = None
    schedule: Literal["gpipe", "1f1b", "interleaved"] | None = None
    stage_layers: list[int] | None = Field(None, max_length=4096)


_MODEL_EX = {"name": "llama3-8b"}
_CLUSTER_EX = {"gpu": "a100-80gb", "num_gpus": 8, "gpus_per_node": 8}
_TRAINING_EX = {"global_batch_size": 32, "seq_length": 2048}
_PAR_EX = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1}


class PlanRequest(_In):
    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False,
        json_schema_extra={"examples": [{"model": _MODEL_EX, "cluster": _CLUSTER_EX, "training": _TRAINING_EX,
                                         "search": {"top_k": 3, "time_limit_s": 10}}]},
    )
    model: ModelIn
    cluster: ClusterIn
    training: TrainingIn
    search: SearchIn | None = None
    metadata: dict[str, Any] | None = Field(None, description="free-form client labels; not part of the request hash nor of the solve")


class EstimateRequest(_In):
    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False,
        json_schema_extra={"examples": [{"model": _MODEL_EX, "cluster": _CLUSTER_EX, "training": _TRAINING_EX, "parallelism": _PAR_EX}]},
    )
    model: ModelIn
    cluster: ClusterIn
    training: TrainingIn
    parallelism: ParallelismIn


class CheckRequest(EstimateRequest):
    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False,
        json_schema_extra={"examples": [{"model": _MODEL_EX, "cluster": _CLUSTER_EX, "training": _TRAINING_EX,
                                         "parallelism": _PAR_EX, "max_slowdown": 0.1}]},
    )
    search: SearchIn | None = None
    max_slowdown: float = Field(0.10, ge=0, lt=100, description="fail when slower than the best plan by more than this fraction")


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
