"""The service facade: plan, estimate and check, each parsing its request once. The CLI and the
REST routes call these three functions and nothing below them, so both interfaces answer the
same question the same way."""

from __future__ import annotations

import math
from dataclasses import asdict, replace

from cost_model.errors import SpecError
from cost_model.estimate import estimate as estimate_config
from cost_model.flops import active_params, total_params
from cost_model.kernels import fp8_recipe
from cost_model.moe import padded_to_capacity
from cost_model.results import Estimate
from cost_model.specs import LayerListSpec, TransformerSpec
from cost_model.validate import (
    dispatcher_error,
    validate_fp8_all_gather,
    validate_fp8_recipe,
    validate_loss_chunks,
    validate_moe_load,
)
from cost_model.vocab import (
    DISPATCHER_ALLTOALL,
    DISPATCHER_DEEPEP,
    ENGINE_MEGATRON,
    STATUS_OPTIMAL,
    TARGET_RANKS,
)

from .hashing import request_hash
from .plan import (
    Alternative,
    CheckResult,
    ClusterEcho,
    ModelSummary,
    Parallelism,
    Plan,
    SearchReport,
    TrainingEcho,
)
from .reasons import alternative_reason, infeasible_details, plan_reasons
from .request.parse import (
    model_to_dict,
    parse_cluster,
    parse_model,
    parse_parallelism,
    parse_training,
)
from .schedule import schedule_block, schedule_reason
from .search import Problem, Progress, search
from .space import parse_search


class Infeasible(Exception):
    """No configuration fits; `details` explains with numbers."""

    def __init__(self, message: str, details: dict):
        super().__init__(message)
        self.message = message
        self.details = details


def problem_from_request(req: dict, profile=None) -> Problem:
    if not isinstance(req, dict):
        raise SpecError("request", "must be an object")
    prob = Problem(
        model=parse_model(req.get("model")),
        cluster=parse_cluster(req.get("cluster")),
        training=parse_training(req.get("training")),
        space=parse_search(req.get("search")),
        profile=profile,
    )
    validate_loss_chunks(_engine(prob), prob.training)
    validate_fp8_all_gather(_engine(prob), prob.training)
    validate_fp8_recipe(_engine(prob), prob.cluster.gpu, prob.training)
    validate_moe_load(prob.model, prob.training, _engine(prob))
    # the FP8 scaling the engine runs on this GPU, stated in the plan (its launch emits it)
    return replace(prob, training=replace(prob.training, fp8_recipe=fp8_recipe(_engine(prob), prob.cluster.gpu,
                                                                                 prob.training)))


def _parallelism(cfg, num_micro_batches: int) -> Parallelism:
    return Parallelism(
        dp=cfg.dp, tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep, etp=cfg.etp, vpp=cfg.vpp,
        sequence_parallel=cfg.sequence_parallel, zero=cfg.zero, micro_batch_size=cfg.micro_batch_size,
        num_micro_batches=num_micro_batches, recompute=cfg.recompute, schedule=cfg.schedule,
        moe_a2a_overlap=cfg.moe_a2a_overlap, cp_comm=cfg.cp_comm if cfg.cp > 1 else None,
        moe_dispatcher=cfg.moe_dispatcher,
        stage_layers=list(cfg.stage_layers) if cfg.stage_layers else None,
        recompute_layers=list(cfg.recompute_layers) if cfg.recompute_layers else None,
    )


def _model_summary(model) -> ModelSummary:
    """The resolved model plus its parameter counts (model-card convention: embeddings and
    the untied output matrix counted, cost_model.flops)."""
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
    usable = c.gpu.memory_gib * (1 - prob.space.memory_headroom)
    if alt.prediction.step_time_s >= est.prediction.step_time_s or max(alt.memory_per_rank_gib) > usable:
        return None
    return (f"with DeepEP (search.moe_dispatcher: [deepep]; the job must have DeepEP installed) this plan's expert "
            f"communication would be {alt.prediction.breakdown.ep_comm_s:.3g} s instead of "
            f"{est.prediction.breakdown.ep_comm_s:.3g} s and the step {alt.prediction.step_time_s:.4g} s instead of "
            f"{est.prediction.step_time_s:.4g} s (peak {max(alt.memory_per_rank_gib):.1f} GiB)")


def _search_plan(prob: Problem, req: dict, time_limit_s, exhaustive, plan_id, progress) -> Plan:
    """The best plan of a parsed problem, without launch artifacts."""
    res = search(prob, exhaustive=exhaustive, deadline_s=time_limit_s, progress=progress)
    if not res.best:
        msg, details = infeasible_details(res.stats, prob.cluster.gpu.memory_gib, prob.space.memory_headroom,
                                          prob.space, prob.model.num_layers, prob.model)
        if res.stats.timed_out:
            msg = "the time limit ran out before any feasible plan was found; " + msg
        raise Infeasible(msg, details)
    best = res.best[0]
    rh = request_hash(req)
    reasons = plan_reasons(best.estimate, best.config, prob.cluster, prob.model)
    schedule = schedule_block(prob, best.config, best.estimate.prediction.step_time_s)
    if (line := schedule_reason(schedule)) is not None:
        reasons.append(line)
    if (line := dispatcher_hint(prob, best.config, best.estimate)) is not None:
        reasons.append(line)
    if res.stats.timed_out:
        reasons.append(f"time limit reached: best plan found so far, within {res.gap * 100:.1f}% of the lower bound")
    elif res.status != STATUS_OPTIMAL and 0 < res.gap <= prob.space.gap_limit:
        reasons.append(f"gap limit reached: the best plan is within {res.gap * 100:.2f}% of the optimum "
                       f"(search.gap_limit {prob.space.gap_limit * 100:g}%)")
    c = prob.cluster
    return Plan(
        id=plan_id or f"p_{rh[:16]}",
        status=res.status,
        request_hash=rh,
        engine=_engine(prob),
        model=_model_summary(prob.model),
        training=TrainingEcho(**asdict(prob.training)),
        cluster=ClusterEcho(
            gpu=c.gpu.name, num_gpus=c.num_gpus, gpus_per_node=c.gpus_per_node, num_nodes=c.num_nodes,
            nvlink_domain=c.nvlink_domain, intra_node_gb_s=c.intra_node_gb_s, inter_node_gb_s=c.inter_node_gb_s,
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
        ),
        reasons=reasons,
        schedule=schedule,
    )


def with_launch(plan: Plan, targets) -> Plan:
    """The plan with its launch artifacts and rank groups (planner.launch)."""
    from .launch import emit
    from .launch.ranks import emit as emit_ranks

    launch = emit(plan, list(targets))
    return plan.model_copy(update={"launch": launch, "ranks": launch.get(TARGET_RANKS) or emit_ranks(plan)})


def plan(
    req: dict,
    profile=None,
    time_limit_s: float | None = None,
    exhaustive: bool = False,
    plan_id: str | None = None,
    progress: Progress | None = None,
) -> Plan:
    """Search the best plan and emit its launch artifacts; raises SpecError (bad input) or
    Infeasible."""
    prob = problem_from_request(req, profile)
    best = _search_plan(prob, req, time_limit_s, exhaustive, plan_id, progress)
    return with_launch(best, prob.space.targets)


def _require_parallelism(req: dict, what: str) -> None:
    if not isinstance(req, dict):
        raise SpecError("request", "must be an object")
    if not req.get("parallelism"):
        raise SpecError("parallelism", f"is required for {what}")


def estimate(req: dict, profile=None) -> Estimate:
    """Request with a `parallelism` block -> Estimate."""
    _require_parallelism(req, "an estimate")
    model = parse_model(req.get("model"))
    cluster = parse_cluster(req.get("cluster"))
    training = parse_training(req.get("training"))
    cfg = parse_parallelism(req["parallelism"])
    return estimate_config(model, cluster, training, cfg, profile)


def check(
    req: dict,
    max_slowdown: float = 0.10,
    profile=None,
    time_limit_s: float | None = None,
    progress: Progress | None = None,
) -> CheckResult:
    """CI gate: does the given configuration fit, and is it within max_slowdown of the best
    plan? The request is parsed once; the best plan is searched but no launch artifact is
    emitted (the answer is yes/no plus numbers)."""
    if not isinstance(max_slowdown, int | float) or not 0 <= max_slowdown < 100 or math.isnan(max_slowdown):
        raise SpecError("max_slowdown", f"must be >= 0, got {max_slowdown!r}", allowed=">= 0")
    _require_parallelism(req, "a check")
    prob = problem_from_request(req, profile)
    # the configuration runs on the engine the search is for, unless it names its own
    par = req["parallelism"]
    if isinstance(par, dict) and "engine" not in par:
        par = {**par, "engine": _engine(prob)}
    cfg = parse_parallelism(par)
    est = estimate_config(prob.model, prob.cluster, prob.training, cfg, profile)
    reasons: list[str] = []
    semantic = {k: v for k, v in req.items() if k != "parallelism"}
    try:
        best = _search_plan(prob, semantic, time_limit_s, False, None, progress)
    except Infeasible as exc:
        best = None
        reasons.append(f"no plan fits: {exc.message}")
    given_t = est.prediction.step_time_s
    best_t = best.prediction.step_time_s if best is not None else None
    slowdown = given_t / best_t - 1 if best_t is not None else None
    if not est.fits:
        m = est.prediction.memory
        reasons.append(f"does not fit: {m.peak_gib:.1f} GiB peak per GPU > {m.capacity_gib:.1f} GiB")
    if slowdown is not None and slowdown > max_slowdown:
        reasons.append(
            f"{slowdown * 100:.1f}% slower than the best plan ({given_t:.4g} s vs {best_t:.4g} s), "
            f"over the {max_slowdown * 100:.0f}% allowed"
        )
    ok = bool(est.fits and (slowdown is None or slowdown <= max_slowdown))
    if ok:
        reasons.append("fits and is within the allowed slowdown of the best plan")
    return CheckResult(
        fits=est.fits, estimate=est, max_slowdown=max_slowdown, reasons=reasons, best=best,
        slowdown=slowdown, best_step_time_s=best_t, step_time_s=given_t, ok=ok,
    )
