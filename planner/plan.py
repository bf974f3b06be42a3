"""The typed Plan (DESIGN.md "Plan"): what `planner.service.plan` returns, what
`POST /v1/plans` answers and `planner plan --json` prints, what `plan.json` holds, what the
launch emitters and the runtime read, and what the client returns.

One pydantic model, so the JSON names live here once: `Plan.model_validate_json(text)` reads
any of those documents back. Derived facts of a parallel layout (world size, dense and expert
data-parallel sizes, the sequence divisor) are properties of `Parallelism`, as torchtitan's
`ParallelDims` (torchtitan/distributed/parallel_dims.py) derives its meshes from the degrees.

The models read like the dicts they replace (`plan["parallelism"]["tp"]`, `.get(key,
default)`), so code written against the JSON keeps working on the typed object."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ConfigDict, Field, model_validator

from cost_model.specs.inputs import ParallelSizes
from cost_model.specs.results import Estimate, Prediction, Record, StageEstimate
from cost_model.specs.vocab import (
    DISPATCHER_ALLTOALL,
    DTYPE_BF16,
    ENGINE_MEGATRON,
    MODEL_TRANSFORMER,
    OPTIMIZER_ADAM,
    RECOMPUTE_NONE,
    SCHEDULE_1F1B,
    CpComm,
    Engine,
    ModelKind,
    MoeDispatcher,
    Recompute,
    Schedule,
    SolverStatus,
    ZeroStage,
)


class Parallelism(ParallelSizes, Record):
    """A resolved parallel layout. Degrees multiply to the world except `ep`/`etp`, which
    are folded over the same ranks as tp x cp x dp (Megatron-Core MoE parallel folding).
    world_size, dense_dp_size and expert_dp_size are cost_model.specs.inputs.ParallelSizes', the
    rules the cost model prices with."""

    dp: int = Field(1, ge=1)
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    cp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    etp: int = Field(1, ge=1, description="expert tensor-parallel size")
    vpp: int = Field(1, ge=1)
    sequence_parallel: bool = False
    zero: ZeroStage = 0
    micro_batch_size: int = Field(1, ge=1)
    num_micro_batches: int = Field(1, ge=1)
    recompute: Recompute = RECOMPUTE_NONE
    schedule: Schedule = SCHEDULE_1F1B
    moe_a2a_overlap: bool = Field(False, description="overlapped 1F1B expert all-to-all (Megatron-Core "
                                  "--overlap-moe-expert-parallel-comm)")
    cp_comm: CpComm | None = Field(None, description="context-parallel communication (cp > 1): p2p ring, all_gather "
                                   "of K/V, a2a (Ulysses) or a2a+p2p (Megatron-Core --cp-comm-type)")
    moe_dispatcher: MoeDispatcher = Field(DISPATCHER_ALLTOALL, description="MoE token dispatcher: alltoall, or deepep "
                                          "(Megatron-Core --moe-token-dispatcher-type flex "
                                          "--moe-flex-dispatcher-backend deepep; needs DeepEP installed)")
    stage_layers: list[int] | None = Field(None, description="blocks per virtual stage, model order")
    recompute_layers: list[int] | None = Field(None, description="recomputed blocks per virtual stage (recompute=full)")

    @model_validator(mode="before")
    @classmethod
    def _none_is_default(cls, data: Any) -> Any:
        # a hand-written plan may spell "not set" as null; the default applies, as it did when
        # the emitters read the dict with `p.get(k) or 1`
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data

    @property
    def seq_divisor(self) -> int:
        """How many ways one sequence's activations are split on a rank: cp, times tp with
        sequence parallelism (Korthikanti et al. 2022 section 4.2.2)."""
        return self.cp * (self.tp if self.sequence_parallel and self.tp > 1 else 1)

    @property
    def global_batch_size(self) -> int:
        """Sequences per step that this layout runs: micro-batch x micro-batches x dp."""
        return self.micro_batch_size * self.num_micro_batches * self.dp


class ModelSummary(Record):
    """The resolved model, echoed as `planner.request.parse.model_to_dict` writes it (transformer
    dims or a layer list), plus the parameter counts of the model-card convention."""

    model_config = ConfigDict(frozen=True, extra="allow")
    name: str
    kind: ModelKind = MODEL_TRANSFORMER
    num_layers: int
    total_params: int | None = Field(None, description="unique parameters, embeddings counted")
    active_params: int | None = Field(None, description="parameters one token touches (MoE: top_k routed experts), embeddings counted")


class TrainingEcho(Record):
    model_config = ConfigDict(frozen=True, extra="allow")
    global_batch_size: int
    seq_length: int
    dtype: str = DTYPE_BF16
    optimizer: str = OPTIMIZER_ADAM


class ClusterEcho(Record):
    model_config = ConfigDict(frozen=True, extra="allow")
    gpu: str
    num_gpus: int
    gpus_per_node: int
    num_nodes: int | None = None
    # GPUs of the job on one NVLink fabric, as priced (parse.job_nvlink_segment): the node,
    # or on rack-scale NVLink (GB200/GB300 NVL72) the equal segment of trays the job lies in
    nvlink_domain: int | None = None
    intra_node_gb_s: float | None = None
    inter_node_gb_s: float | None = None


class Alternative(Record):
    parallelism: Parallelism
    prediction: Prediction
    reason: str


class SearchReport(Record):
    model_config = ConfigDict(frozen=True)
    candidates: int
    pruned: int
    pruned_by_memory: int
    pruned_by_time_bound: int
    ilp_solves: int
    ilp_infeasible: int
    solve_time_s: float = Field(description="the whole search, wall seconds")
    ilp_time_s: float = Field(0.0, description="of which CP-SAT solves, wall seconds")
    solver: str
    gap: float
    timed_out: bool


class Plan(Record):
    id: str
    status: SolverStatus
    request_hash: str
    engine: Engine = ENGINE_MEGATRON
    model: ModelSummary
    training: TrainingEcho
    cluster: ClusterEcho
    parallelism: Parallelism
    stages: list[StageEstimate]
    prediction: Prediction
    fits: bool
    sources: dict[str, str] = Field(default_factory=dict)
    alternatives: list[Alternative] = Field(default_factory=list)
    search: SearchReport
    reasons: list[str] = Field(default_factory=list)
    launch: dict[str, Any] = Field(default_factory=dict, description="artifact per launch target, plus `skipped` reasons")
    ranks: dict[str, Any] | None = Field(None, description="rank -> parallel group assignment (order tp-cp-ep-dp-pp)")
    schedule: dict[str, Any] | None = Field(
        None, description="the simulated pipeline schedule beside the closed form (planner/schedule.py)")

    def to_json(self, indent: int | None = None) -> str:
        """The one JSON text of this plan (what the store keeps, the service answers and
        plan.json holds). Raises ValueError on a non-finite number (NaN/Infinity are not
        JSON), rather than writing null as pydantic's own serialiser would."""
        return json.dumps(self.model_dump(mode="json"), allow_nan=False, indent=indent)


class CheckResult(Record):
    """`planner check` / `POST /v1/check`: does the given configuration fit, and is it within
    `max_slowdown` of the best plan?"""

    fits: bool
    estimate: Estimate = Field(description="the given configuration's estimate")
    max_slowdown: float
    reasons: list[str]
    best: Plan | None = Field(None, description="the best plan found (launch artifacts not emitted)")
    slowdown: float | None = None
    best_step_time_s: float | None = None
    step_time_s: float
    ok: bool
