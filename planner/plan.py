"""The typed Plan (DESIGN.md "Plan"): what `planner.service.plan` returns, what
`POST /v1/plans` answers and `planner plan --json` prints, what `plan.json` holds, what the
launch emitters and the runtime read, and what the client returns.

One pydantic model, so the JSON names live here once: `Plan.model_validate_json(text)` reads
any of those documents back. The parallel layout is the cost model's own type, ParallelConfig
(with its derived sizes: world size, dense and expert data-parallel sizes, the sequence
divisor), so the request's block, the search's candidates and the plan's block are one type.

The models read like the dicts they replace (`plan["parallelism"]["tp"]`, `.get(key,
default)`), so code written against the JSON keeps working on the typed object."""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, ConfigDict, Field, TypeAdapter

from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.results import Estimate, Prediction, Record, StageEstimate
from cost_model.specs.vocab import (
    DTYPE_BF16,
    ENGINE_MEGATRON,
    MODEL_TRANSFORMER,
    OPTIMIZER_ADAM,
    STATUS_OPTIMAL,
    Engine,
    ModelKind,
    SolverStatus,
)

# The prefix of a `reasons` line that quotes an engine's rule (planner/reasons.py) rather than
# saying something about the plan's own numbers; the page folds such lines away.
ENGINE_RULE_PREFIX = "engine rule: "


def _none_is_default(data: Any) -> Any:
    # a hand-written plan may spell "not set" as null; the default applies, as it did when
    # the emitters read the dict with `p.get(k) or 1`
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if v is not None}
    return data


# A plan's parallel layout: the cost model's own type (cost_model.specs.inputs.ParallelConfig,
# whose fields carry their JSON bounds), stating its micro-batches; read from JSON with a
# null taken as the default
Parallelism = Annotated[ParallelConfig, BeforeValidator(_none_is_default)]
_PARALLELISM = TypeAdapter(Parallelism)


def read_parallelism(data: Any) -> ParallelConfig:
    """A plan's `parallelism` block (a ParallelConfig, or its JSON object) as the layout;
    pydantic's ValidationError names a bad field."""
    return data if isinstance(data, ParallelConfig) else _PARALLELISM.validate_python(data)


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
    inter_node_gb_s: float | None = None  # one GPU's share of its node's NICs, as priced
    nics_per_node: int | None = None
    rail_optimized: bool | None = None
    oversubscription: float | None = None


class Alternative(Record):
    """A runner-up: the best plan of another line of the top-k (planner/search/incumbent.py
    distinct_key: degrees, micro-batch, sharding, recompute, schedule), found by a search that
    pruned only what could not beat the k-th plan."""

    parallelism: Parallelism
    prediction: Prediction
    reason: str
    status: SolverStatus = Field(STATUS_OPTIMAL, description="optimal: its stage partition is proven the best of its "
                                 "line; feasible: a partition found without that proof, within `gap`")
    gap: float = Field(0.0, description="how far its step time may lie above its line's best: (time - lower bound) / time")


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
    timed_out: bool = Field(description="the search stopped at its time limit, or ran past it (solve_time_s > "
                            "time_limit_s): the plan is the best found in the time, within `gap`")
    time_limit_s: float | None = Field(None, description="the limit the search ran under (null: the exhaustive "
                                       "reference search, which has none)")


class PlanLinks(Record):
    """Where the REST service serves a stored plan (paths on the service, as the Location
    header gives them): the plan, its compact form, its report page and its pictures."""

    plan: str = Field(description="GET: this plan, the full document")
    compact: str = Field(description="GET: this plan without its bulky parts (Plan.BULKY)")
    report: str = Field(description="GET: the plan report, an HTML page")
    pictures: dict[str, str] = Field(description="picture name -> GET path of the SVG (timeline, breakdown, memory, "
                                     "alternatives)")


class Economics(Record):
    """What the plan's run takes and costs (planner/economics.py has the formulas). Every
    money field is null, with the reason in `reasons`, where no price is known for the GPU;
    the run's fields are null where the request gives no training.total_tokens."""

    usd_per_gpu_h: float | None = Field(None, description="the price used, USD per GPU-hour")
    price_source: str | None = Field(None, description="where the price comes from: the request, a prices file, "
                                     "or the list-price table's entry (provider, page, month)")
    goodput: float = Field(1.0, description="the fraction of wall time that is productive steps (the request's)")
    tokens_per_step: int = Field(description="global_batch_size x seq_length")
    cluster_usd_per_h: float | None = Field(None, description="num_gpus x usd_per_gpu_h")
    tokens_per_dollar: float | None = Field(None, description="tokens_per_step / (step_time_s / goodput / 3600 x "
                                            "cluster_usd_per_h)")
    total_tokens: int | None = Field(None, description="tokens to train on (the request's)")
    steps: int | None = Field(None, description="ceil(total_tokens / tokens_per_step)")
    time_to_train_s: float | None = Field(None, description="steps x step_time_s / goodput")
    time_to_train_h: float | None = Field(None, description="time_to_train_s / 3600")
    cost_usd: float | None = Field(None, description="time_to_train_h x cluster_usd_per_h")
    time_to_train_h_p10: float | None = Field(None, description="time_to_train_h at the prediction's step_time_s_p10")
    time_to_train_h_p90: float | None = Field(None, description="time_to_train_h at the prediction's step_time_s_p90")
    cost_usd_p10: float | None = Field(None, description="cost_usd at the prediction's step_time_s_p10")
    cost_usd_p90: float | None = Field(None, description="cost_usd at the prediction's step_time_s_p90")
    reasons: list[str] = Field(default_factory=list, description="why a field is null")


class Plan(Record):
    # what the compact form leaves out: the launch artifacts, the rank groups, the simulated
    # schedule timeline and the per-stage detail (each can be 10-1000x the rest on a large job)
    BULKY: ClassVar[tuple[str, ...]] = ("stages", "launch", "ranks", "schedule")

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
    economics: Economics | None = Field(None, description="steps, time to train, cost and tokens per dollar")
    launch: dict[str, Any] = Field(default_factory=dict, description="artifact per launch target, plus `skipped` reasons")
    ranks: dict[str, Any] | None = Field(None, description="rank -> parallel group assignment (order tp-cp-ep-dp-pp)")
    schedule: dict[str, Any] | None = Field(
        None, description="the simulated pipeline schedule beside the closed form (planner/schedule.py)")
    links: PlanLinks | None = Field(None, description="REST answers: where the service serves this plan, its report "
                                    "and pictures; null outside the service (CLI, plan.json)")

    def compact_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready dict without its BULKY parts (`planner plan --compact`,
        `?compact=true`)."""
        return compact(self.model_dump(mode="json"))

    def to_json(self, indent: int | None = None) -> str:
        """The one JSON text of this plan (what the store keeps, the service answers and
        plan.json holds). Raises ValueError on a non-finite number (NaN/Infinity are not
        JSON), rather than writing null as pydantic's own serialiser would."""
        return json.dumps(self.model_dump(mode="json"), allow_nan=False, indent=indent)


def compact(doc: dict[str, Any]) -> dict[str, Any]:
    """A plan's JSON object (a dict, as stored or dumped) without Plan.BULKY."""
    return {k: v for k, v in doc.items() if k not in Plan.BULKY}


class CompactPlan(Plan):
    """A plan's compact form: the Plan without its BULKY parts (what `?compact=true` answers
    and `planner plan --compact` prints); as a schema, the Plan with `stages` optional."""

    stages: list[StageEstimate] | None = Field(None, description="left out of the compact form")


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
