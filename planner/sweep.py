"""Sweeps: plan one model over a list of GPU counts or global batch sizes (everything else
of the request fixed), for the scaling picture (planner/report/scaling.py) and table.

The request is the validated PlanRequest (a plain dict is validated once, as the facade
does). A point that has no feasible plan, or whose value makes the request invalid (say a
GPU count that is not a whole number of nodes), is kept with its reason rather than failing
the sweep; a request that is bad at the first value raises its SpecError.

A sweep may have an overall deadline: each point's time limit is capped by what is left,
and the points it leaves no time for are kept as skipped, with the reason, not dropped."""

from __future__ import annotations

import time
from typing import Any

from cost_model.specs.errors import SpecError
from planner.request.errors import validate_as
from planner.request.schema import Cluster, PlanRequest, Training
from planner.service import Infeasible, plan, problem_from_request, validated

AXES = ("num_gpus", "global_batch_size")
MAX_POINTS = 32
# a point is not started with less time than this left of the sweep's deadline: a solve cut
# that short proves nothing, and its answer would come after the deadline anyway
MIN_POINT_S = 0.5


def _with_value(req: PlanRequest, axis: str, value: int) -> PlanRequest:
    """The request of one point: the swept field set to `value`, the block that holds it
    validated again (the value is new input: a GPU count past the limit is refused by name)."""
    if axis == "num_gpus":
        cluster = {**dict(req.cluster), "num_gpus": value}
        if cluster["gpus_per_node"] is not None and cluster["gpus_per_node"] > value:
            cluster["gpus_per_node"] = value  # a sweep may start below one node
        return req.model_copy(update={"cluster": validate_as(Cluster, cluster, "cluster")})
    training = {**dict(req.training), "global_batch_size": value}
    return req.model_copy(update={"training": validate_as(Training, training, "training")})


def parse_axis(axis: str, values: Any) -> list[int]:
    if axis not in AXES:
        raise SpecError("sweep", f"axis must be one of {', '.join(AXES)}, got {axis!r}", allowed=list(AXES))
    if not isinstance(values, list | tuple) or not values:
        raise SpecError(f"sweep.{axis}", "must be a non-empty list of integers")
    if len(values) > MAX_POINTS:
        raise SpecError(f"sweep.{axis}", f"at most {MAX_POINTS} values, got {len(values)}", allowed=f"1..{MAX_POINTS} values")
    out = []
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SpecError(f"sweep.{axis}", f"values must be integers >= 1, got {v!r}", allowed=">= 1")
        out.append(v)
    return sorted(set(out))


def point(req: PlanRequest, axis: str, value: int, profile=None, time_limit_s: float | None = None) -> dict[str, Any]:
    """One point of a sweep: the plan's numbers, or why there is none."""
    try:
        p = plan(_with_value(req, axis, value), profile, time_limit_s).model_dump(mode="json")
    except Infeasible as exc:
        return {"value": value, "ok": False, "error": exc.message}
    except SpecError as exc:  # this value makes the request invalid (e.g. not whole nodes)
        return {"value": value, "ok": False, "error": str(exc)}
    pred = p["prediction"]
    return {
        "value": value, "ok": True, "plan_id": p["id"], "num_gpus": p["cluster"]["num_gpus"],
        "global_batch_size": p["training"]["global_batch_size"], "parallelism": p["parallelism"],
        "step_time_s": pred["step_time_s"], "tokens_per_s": pred["tokens_per_s"], "mfu": pred["mfu"],
        "peak_gib": pred["memory"]["peak_gib"], "status": p["status"],
        "simulated_step_time_s": (p.get("schedule") or {}).get("simulated_step_time_s"),
    }


def skipped_point(value: int, deadline_s: float) -> dict[str, Any]:
    """A point the sweep's deadline left no time for."""
    return {"value": value, "ok": False, "skipped": True,
            "error": f"skipped: the sweep's {deadline_s:g} s deadline was reached before this point"}


def point_limit_s(time_limit_s: float | None, left_s: float | None) -> float | None:
    """A point's time limit: the per-solve limit capped by what is left of the deadline."""
    if left_s is None:
        return time_limit_s
    return left_s if time_limit_s is None else min(time_limit_s, left_s)


def check_request(req: PlanRequest, axis: str, values: list[int]) -> None:
    """Raise SpecError for a request that is bad whatever the swept value (the first one's)."""
    problem_from_request(_with_value(req, axis, values[0]))


def header(req: PlanRequest, axis: str, values: list[int]) -> dict[str, Any]:
    cluster, training = req.cluster, req.training
    fixed = {"GPUs": cluster.num_gpus, "batch": training.global_batch_size, "seq": training.seq_length}
    fixed.pop("GPUs" if axis == "num_gpus" else "batch")
    gpu = cluster.gpu
    return {
        "axis": axis,
        "values": values,
        "model": req.model.name or "model",
        "gpu": gpu if isinstance(gpu, str) else gpu.name or gpu.base or "custom",
        "fixed": fixed,
    }


def sweep(req: PlanRequest | dict, axis: str, values, profile=None, time_limit_s: float | None = None,
          deadline_s: float | None = None) -> dict[str, Any]:
    """Plan `req` at each value of `axis`; returns {axis, values, model, gpu, fixed, points}.
    With `deadline_s`, the whole sweep stops starting points once less than MIN_POINT_S is left."""
    req = validated(req, PlanRequest)
    xs = parse_axis(axis, values)
    check_request(req, axis, xs)
    start_s = time.monotonic()
    points = []
    for x in xs:
        left_s = None if deadline_s is None else deadline_s - (time.monotonic() - start_s)
        if left_s is not None and left_s < MIN_POINT_S:
            points.append(skipped_point(x, deadline_s))
            continue
        points.append(point(req, axis, x, profile, point_limit_s(time_limit_s, left_s)))
    return {**header(req, axis, xs), "points": points}


def table(result: dict) -> str:
    """The sweep as a text table (what `planner sweep` prints)."""
    head = "GPUs" if result["axis"] == "num_gpus" else "batch"
    lines = [f"{head:>7s} {'dp':>4s} {'tp':>3s} {'pp':>3s} {'cp':>3s} {'ep':>3s} {'vpp':>3s} {'mb':>3s} {'zero':>4s} "
             f"{'recompute':>9s} {'schedule':>11s} {'step':>10s} {'tokens/s':>11s} {'MFU':>6s} {'mem GiB':>8s}"]
    for p in result["points"]:
        if not p["ok"]:
            lines.append(f"{p['value']:>7d}  no plan: {p['error']}")
            continue
        par = p["parallelism"]
        step = p["step_time_s"]
        lines.append(
            f"{p['value']:>7d} {par['dp']:>4d} {par['tp']:>3d} {par['pp']:>3d} {par['cp']:>3d} {par['ep']:>3d} {par['vpp']:>3d} "
            f"{par['micro_batch_size']:>3d} {par['zero']:>4d} {par['recompute']:>9s} {par['schedule']:>11s} "
            f"{(f'{step * 1e3:.1f} ms' if step < 1 else f'{step:.3f} s'):>10s} {p['tokens_per_s']:>11,.0f} "
            f"{p['mfu'] * 100:>5.1f}% {p['peak_gib']:>8.1f}"
        )
    return "\n".join(lines)
