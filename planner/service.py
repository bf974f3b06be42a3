"""The service facade: plan, estimate and check, each parsing its request once. The CLI and the
REST routes call these three functions and nothing below them, so both interfaces answer the
same question the same way."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from cost_model.errors import SpecError
from cost_model.estimate import estimate as estimate_config
from cost_model.parse import (
    model_to_dict,
    parse_cluster,
    parse_model,
    parse_parallelism,
    parse_training,
)
from cost_model.results import Estimate

from .hashing import request_hash
from .reasons import alternative_reason, infeasible_details, plan_reasons
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
    return Problem(
        model=parse_model(req.get("model")),
        cluster=parse_cluster(req.get("cluster")),
        training=parse_training(req.get("training")),
        space=parse_search(req.get("search")),
        profile=profile,
    )


def _parallelism_dict(cfg, num_micro_batches: int) -> dict:
    return {
        "dp": cfg.dp, "tp": cfg.tp, "pp": cfg.pp, "cp": cfg.cp, "ep": cfg.ep, "vpp": cfg.vpp,
        "sequence_parallel": cfg.sequence_parallel, "zero": cfg.zero, "micro_batch_size": cfg.micro_batch_size,
        "num_micro_batches": num_micro_batches, "recompute": cfg.recompute, "schedule": cfg.schedule,
        "stage_layers": list(cfg.stage_layers) if cfg.stage_layers else None,
        "recompute_layers": list(cfg.recompute_layers) if cfg.recompute_layers else None,
    }


def _prediction_dict(est) -> dict:
    return asdict(est.prediction)


def _stages(est) -> list[dict]:
    return [{**asdict(s), "layers": list(s.layers)} for s in est.stages]


def plan(
    req: dict,
    profile=None,
    time_limit_s: float | None = None,
    exhaustive: bool = False,
    plan_id: str | None = None,
    progress: Progress | None = None,
) -> dict:
    """Search the best plan; raises SpecError (bad input) or Infeasible."""
    prob = problem_from_request(req, profile)
    res = search(prob, exhaustive=exhaustive, deadline_s=time_limit_s, progress=progress)
    cap = prob.cluster.gpu.memory_gib
    if not res.best:
        msg, details = infeasible_details(res.stats, cap, prob.space.memory_headroom)
        if res.stats.timed_out:
            msg = "the time limit ran out before any feasible plan was found; " + msg
        raise Infeasible(msg, details)
    best = res.best[0]
    rh = request_hash(req)
    plan: dict[str, Any] = {
        "id": plan_id or f"p_{rh[:16]}",
        "status": res.status,
        "request_hash": rh,
        "model": model_to_dict(prob.model),
        "training": asdict(prob.training),
        "cluster": {
            "gpu": prob.cluster.gpu.name, "num_gpus": prob.cluster.num_gpus, "gpus_per_node": prob.cluster.gpus_per_node,
            "num_nodes": prob.cluster.num_nodes, "intra_node_gb_s": prob.cluster.intra_node_gb_s,
            "inter_node_gb_s": prob.cluster.inter_node_gb_s,
        },
        "parallelism": _parallelism_dict(best.config, best.estimate.num_micro_batches),
        "stages": _stages(best.estimate),
        "prediction": _prediction_dict(best.estimate),
        "fits": best.estimate.fits,
        "sources": best.estimate.sources,
        "alternatives": [
            {
                "parallelism": _parallelism_dict(f.config, f.estimate.num_micro_batches),
                "prediction": _prediction_dict(f.estimate),
                "reason": alternative_reason(f.estimate, best.estimate, f.candidate, best.candidate),
            }
            for f in res.best[1:]
        ],
        "search": {
            "candidates": res.stats.candidates,
            "pruned": res.stats.pruned_memory + res.stats.pruned_time,
            "pruned_by_memory": res.stats.pruned_memory,
            "pruned_by_time_bound": res.stats.pruned_time,
            "ilp_solves": res.stats.ilp_solves,
            "ilp_infeasible": res.stats.infeasible,
            "solve_time_s": round(res.stats.solve_time_s, 4),
            "ilp_time_s": round(res.stats.ilp_time_s, 4),
            "solver": res.stats.solver,
            "gap": round(res.gap, 6),
            "timed_out": res.stats.timed_out,
        },
        "reasons": plan_reasons(best.estimate, best.config, prob.cluster, prob.model),
    }
    if res.stats.timed_out:
        plan["reasons"].append(f"time limit reached: best plan found so far, within {res.gap * 100:.1f}% of the lower bound")
    _attach_launch(plan, prob.space.targets)
    return plan


def estimate(req: dict, profile=None) -> Estimate:
    """Request with a `parallelism` block -> Estimate."""
    if not isinstance(req, dict):
        raise SpecError("request", "must be an object")
    if not req.get("parallelism"):
        raise SpecError("parallelism", "is required for an estimate")
    model = parse_model(req.get("model"))
    cluster = parse_cluster(req.get("cluster"))
    training = parse_training(req.get("training"))
    cfg = parse_parallelism(req["parallelism"])
    return estimate_config(model, cluster, training, cfg, profile)


def _attach_launch(plan: dict, targets) -> None:
    from .launch import emit
    from .launch.ranks import emit as emit_ranks

    launch = emit(plan, list(targets))
    plan["launch"] = launch
    plan["ranks"] = launch.get("ranks") or emit_ranks(plan)


def check(
    req: dict,
    max_slowdown: float = 0.10,
    profile=None,
    time_limit_s: float | None = None,
    progress: Progress | None = None,
) -> dict:
    """CI gate: does the given configuration fit, and is it within max_slowdown of the best plan?"""
    if not isinstance(max_slowdown, int | float) or not 0 <= max_slowdown < 100 or math.isnan(max_slowdown):
        raise SpecError("max_slowdown", f"must be >= 0, got {max_slowdown!r}", allowed=">= 0")
    if not isinstance(req, dict) or not req.get("parallelism"):
        raise SpecError("parallelism", "is required for a check")
    prob = problem_from_request(req, profile)
    cfg = parse_parallelism(req["parallelism"])
    est = estimate_config(prob.model, prob.cluster, prob.training, cfg, profile)
    out: dict[str, Any] = {
        "fits": est.fits,
        "estimate": est.to_dict(),
        "max_slowdown": max_slowdown,
        "reasons": [],
    }
    try:
        best = plan({k: v for k, v in req.items() if k != "parallelism"}, profile, time_limit_s, progress=progress)
    except Infeasible as exc:
        best = None
        out["reasons"].append(f"no plan fits: {exc.message}")
    given_t = est.prediction.step_time_s
    out["best"] = best
    if best is not None:
        best_t = best["prediction"]["step_time_s"]
        slowdown = given_t / best_t - 1
        out["slowdown"] = slowdown
        out["best_step_time_s"] = best_t
    else:
        slowdown = 0.0
        out["slowdown"] = None
    out["step_time_s"] = given_t
    if not est.fits:
        p = est.prediction.memory
        out["reasons"].append(f"does not fit: {p.peak_gib:.1f} GiB peak per GPU > {p.capacity_gib:.1f} GiB")
    if best is not None and slowdown > max_slowdown:
        out["reasons"].append(
            f"{slowdown * 100:.1f}% slower than the best plan ({given_t:.4g} s vs {best['prediction']['step_time_s']:.4g} s), "
            f"over the {max_slowdown * 100:.0f}% allowed"
        )
    out["ok"] = bool(est.fits and (best is None or slowdown <= max_slowdown))
    if out["ok"]:
        out["reasons"].append("fits and is within the allowed slowdown of the best plan")
    return out
