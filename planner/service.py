"""The service facade: plan, estimate and check. The CLI and the REST routes call these three
functions and nothing below them, so both interfaces answer the same question the same way.

Each takes its request as the edge validated it (PlanRequest, EstimateRequest, CheckRequest:
planner/request/schema.py) and turns its blocks into the cost model's specs once. A plain
dict (Python callers, scripts, tests) is validated here, once, with the same schema and the
same errors, then goes the same way. The request hash is computed from the dict form the
request arrived in: a validated request's JSON dump without nulls (what the REST body and
the CLI hash), a dict as given (planner/hashing.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TypeVar

from pydantic import BaseModel

from cost_model.engines.kernels import fp8_recipe
from cost_model.estimate import estimate as estimate_config
from cost_model.hardware.prices import GpuPrice
from cost_model.model.flops import active_params, total_params
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import LayerListSpec, ParallelConfig, TransformerSpec
from cost_model.specs.results import GIB, Estimate
from cost_model.specs.vocab import (
    DISPATCHER_ALLTOALL,
    DISPATCHER_DEEPEP,
    ENGINE_MEGATRON,
    STATUS_OPTIMAL,
    TARGET_RANKS,
)
from cost_model.terms.moe import padded_to_capacity
from cost_model.validate import (
    dispatcher_error,
    validate_fp8_all_gather,
    validate_fp8_recipe,
    validate_loss_chunks,
    validate_moe_load,
)
from planner.economics import Costing, costing, economics
from planner.hashing import request_hash
from planner.ids import new_plan_id
from planner.launch import emit
from planner.launch.ranks import emit as emit_ranks
from planner.plan import (
    Alternative,
    CheckResult,
    ClusterEcho,
    ModelSummary,
    Plan,
    SearchReport,
    TrainingEcho,
)
from planner.publish import LatestPublisher
from planner.reasons import alternative_reason, infeasible_details, plan_reasons
from planner.request.errors import validate_as
from planner.request.parse import (
    cluster_spec,
    model_spec,
    model_to_dict,
    training_spec,
)
from planner.request.schema import CheckRequest, EstimateRequest, PlanRequest, Search
from planner.schedule import schedule_block, schedule_gain_reason, schedule_reason
from planner.search import Problem, Progress, SearchResult, search
from planner.search.tables import search_capacity_bytes
from planner.space import check_expert_offload_levels, search_space

Request = TypeVar("Request", bound=BaseModel)


class Infeasible(Exception):
    """No configuration fits; `details` explains with numbers."""

    def __init__(self, message: str, details: dict):
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self):  # crosses process boundaries (the service's worker processes) whole
        return (Infeasible, (self.message, self.details))


def validated(req: BaseModel | dict, schema: type[Request]) -> Request:
    """The request as the edge validated it, or a plain dict validated once here against
    `schema` (a bad field raises SpecError with its path, as the REST 422 and the CLI say it).
    A bare preset name stands for the `model` block, as parse_model takes it."""
    if isinstance(req, BaseModel):
        return req
    if not isinstance(req, dict):
        raise SpecError("request", "must be an object")
    if isinstance(req.get("model"), str):
        req = {**req, "model": {"name": req["model"]}}
    return validate_as(schema, req)


def problem_from_request(req: PlanRequest | CheckRequest | dict, profile=None) -> Problem:
    """The search problem of a plan (or check) request: its blocks as the cost model's specs,
    its search space, and the training rules that depend on the engine it plans for."""
    r = validated(req, PlanRequest)
    prob = Problem(
        model=model_spec(r.model),
        cluster=cluster_spec(r.cluster),
        training=training_spec(r.training),
        # the request's one engine (schema.one_engine), also where it has no search block (check)
        space=search_space((r.search or Search()).model_copy(update={"engine": r.engine})),
        profile=profile,
    )
    validate_loss_chunks(_engine(prob), prob.training)
    validate_fp8_all_gather(_engine(prob), prob.training)
    validate_fp8_recipe(_engine(prob), prob.cluster.gpu, prob.training)
    validate_moe_load(prob.model, prob.training, _engine(prob))
    check_expert_offload_levels(prob.model, prob.space, prob.training)
    # the FP8 scaling the engine runs on this GPU, stated in the plan (its launch emits it)
    return replace(prob, training=replace(prob.training, fp8_recipe=fp8_recipe(_engine(prob), prob.cluster.gpu,
                                                                                 prob.training)))


def _parallelism(cfg: ParallelConfig, num_micro_batches: int) -> ParallelConfig:
    """A searched layout as the plan states it: its micro-batches counted, a context-parallel
    communication kind only where there is context parallelism."""
    return replace(cfg, num_micro_batches=num_micro_batches, cp_comm=cfg.cp_comm if cfg.cp > 1 else None)


def _model_summary(model) -> ModelSummary:
    """The resolved model plus its parameter counts (model-card convention: embeddings and
    the untied output matrix counted, cost_model.model.flops)."""
    if isinstance(model, LayerListSpec):
        total = active = float(sum(layer.params for layer in model.layers))
    else:
        total, active = total_params(model), active_params(model)
    return ModelSummary(**model_to_dict(model), total_params=round(total), active_params=round(active))


def _engine(prob: Problem) -> str:
    """The engine the (parsed) search is for."""
    return (prob.space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]


def dispatcher_hint(prob: Problem, cfg, est) -> str | None:
    """Where the search kept the default alltoall dispatcher (search.moe_dispatcher unset)
    and DeepEP runs on this cluster, what the same plan would take with it, fits included:
    DeepEP is a separate install, so the plan does not assume it, but says what it is worth."""
    m, c = prob.model, prob.cluster
    if (prob.space.allowed.get("moe_dispatcher") is not None or not isinstance(m, TransformerSpec)
            or padded_to_capacity(prob.training)
            or m.moe is None or cfg.moe_dispatcher != DISPATCHER_ALLTOALL or est.prediction.breakdown.ep_comm_s <= 0
            or dispatcher_error(c, cfg.engine, DISPATCHER_DEEPEP, cfg.ep, cfg.etp) is not None):
        return None
    try:
        alt = estimate_config(m, c, prob.training, replace(cfg, moe_dispatcher=DISPATCHER_DEEPEP), prob.profile)
    except SpecError:  # a rule of DeepEP's the plan's configuration breaks: nothing to say
        return None
    usable = search_capacity_bytes(prob, cfg.engine) / GIB  # what the search lets a point estimate use
    if alt.prediction.step_time_s >= est.prediction.step_time_s or alt.prediction.memory.peak_gib > usable:
        return None
    return (f"with DeepEP (search.moe_dispatcher: [deepep]; the job must have DeepEP installed) this plan's expert "
            f"communication would be {alt.prediction.breakdown.ep_comm_s:.3g} s instead of "
            f"{est.prediction.breakdown.ep_comm_s:.3g} s and the step {alt.prediction.step_time_s:.4g} s instead of "
            f"{est.prediction.step_time_s:.4g} s (peak {max(alt.memory_per_rank_gib):.1f} GiB)")


def _limit_s(prob: Problem, time_limit_s, exhaustive) -> float | None:
    """The time limit a search runs under (none for the exhaustive reference search)."""
    return None if exhaustive else (prob.space.time_limit_s if time_limit_s is None else time_limit_s)


def _search_plan(prob: Problem, rh: str, time_limit_s, exhaustive, plan_id, progress, cost: Costing,
                 publish: Callable[[SearchResult], None] | None = None) -> Plan:
    """The best plan of a parsed problem (`rh`: its request's hash), without launch artifacts;
    `cost`: the request's price, tokens to train on and goodput, for the plan's economics;
    `publish`: given the search as it stands each time its best plan changes."""
    res = search(prob, exhaustive=exhaustive, deadline_s=time_limit_s, progress=progress, publish=publish)
    return _plan_of(prob, res, rh, _limit_s(prob, time_limit_s, exhaustive), plan_id, cost)


def _plan_of(prob: Problem, res: SearchResult, rh: str, limit_s: float | None, plan_id, cost: Costing,
             unfinished: bool = False) -> Plan:
    """The plan of a search's result (raises Infeasible where it has none); `unfinished`: the
    result is a running search's snapshot (BestFirstSearch.snapshot), its best plan so far."""
    if not res.best:
        msg, details = infeasible_details(res.stats, prob.space, prob.model, prob.cluster, prob.training)
        if res.stats.timed_out:
            msg = "the time limit ran out before any feasible plan was found; " + msg
        raise Infeasible(msg, details)
    best = res.best[0]
    reasons = plan_reasons(best.estimate, best.config, prob.cluster, prob.model, prob.training,
                           prob.space.memory_headroom)
    schedule = schedule_block(prob, best.config, best.estimate.prediction.step_time_s)
    if (line := schedule_reason(schedule)) is not None:
        reasons.append(line)
    if (line := schedule_gain_reason(schedule)) is not None:
        reasons.append(line)
    if (line := dispatcher_hint(prob, best.config, best.estimate)) is not None:
        reasons.append(line)
    if unfinished:
        reasons.append(_unfinished_reason(res, limit_s))
    elif res.stats.timed_out:
        reasons.append(_timed_out_reason(res, limit_s))
    elif res.status != STATUS_OPTIMAL and 0 < res.gap <= prob.space.gap_limit:
        reasons.append(f"gap limit reached: the best plan is within {res.gap * 100:.2f}% of the optimum "
                       f"(search.gap_limit {prob.space.gap_limit * 100:g}%)")
    c = prob.cluster
    return Plan(
        id=plan_id or new_plan_id(),  # one format with the service's (planner.ids)
        status=res.status,
        request_hash=rh,
        engine=_engine(prob),
        model=_model_summary(prob.model),
        training=TrainingEcho(**asdict(prob.training)),
        cluster=ClusterEcho(
            gpu=c.gpu.name, num_gpus=c.num_gpus, gpus_per_node=c.gpus_per_node, num_nodes=c.num_nodes,
            nvlink_domain=c.nvlink_domain, intra_node_gb_s=c.intra_node_gb_s, inter_node_gb_s=c.inter_node_gb_s,
            nics_per_node=c.nics_per_node, rail_optimized=c.rail_optimized, oversubscription=c.oversubscription,
        ),
        parallelism=_parallelism(best.config, best.estimate.num_micro_batches),
        stages=list(best.estimate.stages),
        prediction=best.estimate.prediction,
        fits=best.estimate.fits,
        sources=best.estimate.sources,
        alternatives=[
            Alternative(
                parallelism=_parallelism(f.config, f.estimate.num_micro_batches),
                prediction=f.estimate.prediction,
                reason=alternative_reason(f.estimate, best.estimate, f.candidate, best.candidate),
                status=f.status,
                gap=_gap(f),
            )
            for f in res.best[1:]
        ],
        search=SearchReport(
            candidates=res.stats.candidates,
            pruned=res.stats.pruned_memory + res.stats.pruned_time,
            pruned_by_memory=res.stats.pruned_memory,
            pruned_by_time_bound=res.stats.pruned_time,
            ilp_solves=res.stats.ilp_solves,
            ilp_infeasible=res.stats.infeasible,
            solve_time_s=round(res.stats.solve_time_s, 4),
            ilp_time_s=round(res.stats.ilp_time_s, 4),
            solver=res.stats.solver,
            gap=round(res.gap, 6),
            timed_out=res.stats.timed_out,
            time_limit_s=limit_s,
        ),
        reasons=reasons,
        economics=economics(cost, best.estimate.prediction.step_time_s, prob.training.global_batch_size,
                            prob.training.seq_length, c.num_gpus, best.estimate.prediction.step_time_s_p10,
                            best.estimate.prediction.step_time_s_p90),
        schedule=schedule,
    )


def _timed_out_reason(res, limit_s: float | None) -> str:
    """What the time limit did to the plan: cut the search short (the gap says how far the
    plan may be from the optimum), or only ran out while the search finished its proof."""
    took = f"the search took {res.stats.solve_time_s:.1f} s" + (f" of a {limit_s:g} s limit" if limit_s else "")
    if res.status == STATUS_OPTIMAL:
        return f"time limit passed: {took}; the plan is still proven optimal"
    return f"time limit reached: {took}; best plan found so far, within {res.gap * 100:.1f}% of the lower bound"


def _unfinished_reason(res, limit_s: float | None) -> str:
    """A best plan so far, published while its search ran: the search had not finished."""
    of = f" of a {limit_s:g} s limit" if limit_s else ""
    return (f"search unfinished: best plan found so far, {res.stats.solve_time_s:.1f} s into the search{of}, "
            f"within {res.gap * 100:.1f}% of the lower bound of what it had not yet searched")


def _gap(f) -> float:
    """A kept plan's gap to its own lower bound: 0 where its partition is proven."""
    t = f.estimate.prediction.step_time_s
    return 0.0 if f.status == STATUS_OPTIMAL or t <= 0 else round(max(0.0, (t - f.bound_s) / t), 6)


def with_launch(plan: Plan, targets) -> Plan:
    """The plan with its launch artifacts and rank groups (planner.launch)."""
    launch = emit(plan, list(targets))
    return plan.model_copy(update={"launch": launch, "ranks": launch.get(TARGET_RANKS) or emit_ranks(plan)})


def plan(
    req: PlanRequest | dict,
    profile=None,
    time_limit_s: float | None = None,
    exhaustive: bool = False,
    plan_id: str | None = None,
    progress: Progress | None = None,
    prices: dict[str, GpuPrice] | None = None,
    publish: Callable[[Plan], None] | None = None,
) -> Plan:
    """Search the best plan and emit its launch artifacts; raises SpecError (bad input) or
    Infeasible. `prices`: a user's own GPU-hour prices (gpu -> GpuPrice, `planner plan
    --prices`), between the request's price and the list-price table. `publish`: given the
    best plan so far, finished as this answer would be (launch artifacts included, the reason
    saying the search had not finished), while the search runs (planner/publish.py): what a
    caller that stops the search from outside answers with."""
    r = validated(req, PlanRequest)
    prob = problem_from_request(r, profile)
    cost = costing(r.cluster, r.training, prob.cluster.gpu.name, prices)
    rh = request_hash(req)
    if publish is None or exhaustive:
        best = _search_plan(prob, rh, time_limit_s, exhaustive, plan_id, progress, cost)
        return with_launch(best, prob.space.targets)
    plan_id = plan_id or new_plan_id()  # the published plans and the answer are one plan

    def build(res: SearchResult) -> Plan:
        return with_launch(_plan_of(prob, res, rh, _limit_s(prob, time_limit_s, False), plan_id, cost,
                                    unfinished=True), prob.space.targets)

    with LatestPublisher(build, publish) as publisher:
        best = _search_plan(prob, rh, time_limit_s, False, plan_id, progress, cost, publish=publisher.offer)
    return with_launch(best, prob.space.targets)


def _require_parallelism(req: BaseModel | dict, what: str) -> None:
    """A dict without its `parallelism` block is refused by name (the schema requires it of a
    validated request)."""
    if isinstance(req, dict) and not req.get("parallelism"):
        raise SpecError("parallelism", f"is required for {what}")


def estimate(req: EstimateRequest | dict, profile=None) -> Estimate:
    """Request with a `parallelism` block -> Estimate."""
    _require_parallelism(req, "an estimate")
    r = validated(req, EstimateRequest)
    return estimate_config(model_spec(r.model), cluster_spec(r.cluster), training_spec(r.training),
                           r.parallelism, profile)


def check(
    req: CheckRequest | dict,
    max_slowdown: float | None = None,
    profile=None,
    time_limit_s: float | None = None,
    progress: Progress | None = None,
) -> CheckResult:
    """CI gate: does the given configuration fit, and is it within max_slowdown of the best
    plan? The request is parsed once; the best plan is searched but no launch artifact is
    emitted (the answer is yes/no plus numbers). `max_slowdown`: the request's unless given."""
    if max_slowdown is not None and (not isinstance(max_slowdown, int | float) or not 0 <= max_slowdown < 100
                                     or math.isnan(max_slowdown)):
        raise SpecError("max_slowdown", f"must be >= 0, got {max_slowdown!r}", allowed=">= 0")
    _require_parallelism(req, "a check")
    r = validated(req, CheckRequest)
    if max_slowdown is None:
        max_slowdown = r.max_slowdown
    prob = problem_from_request(r, profile)
    # the given configuration and the best plan are priced for the request's one engine
    est = estimate_config(prob.model, prob.cluster, prob.training, r.parallelism, profile)
    reasons: list[str] = []
    try:
        best = _search_plan(prob, request_hash(req), time_limit_s, False, None, progress,
                            costing(r.cluster, r.training, prob.cluster.gpu.name))
    except Infeasible as exc:
        best = None
        reasons.append(f"no plan fits: {exc.message}")
    given_t = est.prediction.step_time_s
    best_t = best.prediction.step_time_s if best is not None else None
    slowdown = given_t / best_t - 1 if best_t is not None else None
    m = est.prediction.memory
    if not est.fits:
        point = (f"the point estimate {m.peak_gib:.1f} GiB would fit" if m.peak_gib <= m.capacity_gib
                 else f"point estimate {m.peak_gib:.1f} GiB")
        reasons.append(f"does not fit: the upper bound of the peak per GPU, {m.peak_upper_gib:.1f} GiB, > "
                       f"{m.capacity_gib:.1f} GiB ({point}; {est.prediction.interval_source})")
    if slowdown is not None and slowdown > max_slowdown:
        reasons.append(
            f"{slowdown * 100:.1f}% slower than the best plan ({given_t:.4g} s vs {best_t:.4g} s), "
            f"over the {max_slowdown * 100:.0f}% allowed"
        )
    ok = bool(est.fits and (slowdown is None or slowdown <= max_slowdown))
    if ok:
        reasons.append(f"fits (upper bound of the peak {m.peak_upper_gib:.1f} of {m.capacity_gib:.1f} GiB) and is "
                       f"within the allowed slowdown of the best plan")
    return CheckResult(
        fits=est.fits, estimate=est, max_slowdown=max_slowdown, reasons=reasons, best=best,
        slowdown=slowdown, best_step_time_s=best_t, step_time_s=given_t, ok=ok,
    )
