"""Sweeps: plan one model over a grid of GPU types, GPU counts or global batch sizes
(everything else of the request fixed), for the scaling picture (planner/report/scaling.py),
the cost-vs-time picture (planner/report/frontier.py) and their tables.

Axes, outermost first: `gpu` (catalog GPU names), then at most one of `num_gpus` and
`global_batch_size`. One axis is the classic sweep (its points carry `value`); `gpu` x
`num_gpus` is "choose the cluster": every point's plan is priced (planner/economics.py), the
Pareto front of time-to-train against cost is marked and a deadline or budget picks a point
(planner/frontier.py).

The request is the validated PlanRequest (a plain dict is validated once, as the facade
does). A point that has no feasible plan, or whose value makes the request invalid (say a
GPU count that is not a whole number of nodes, or an FP8 recipe the GPU does not run), is kept
with its reason rather than failing the sweep; a request that is bad at every point raises the
first point's SpecError.

A sweep over GPU types takes every per-GPU fact from the catalog (memory, node size, NVLink
domain, link speeds, fp8/mxfp8 support): a request that states one of them for its one GPU
(cluster.gpus_per_node, cluster.nvlink_domain, link speeds or latencies, a profile, or a single
cluster.price_per_gpu_hour) is refused by name, since it cannot hold for every type; per-GPU
prices come from a prices table (`planner sweep --prices`, REST `sweep.prices`). It needs
training.total_tokens: the time to train and its cost are what it compares.

A sweep may have an overall deadline: each point's time limit is capped by what is left,
and the points it leaves no time for are kept as skipped, with the reason, not dropped."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from cost_model.hardware.catalog import get_gpu
from cost_model.hardware.prices import GpuPrice
from cost_model.specs.errors import SpecError
from planner.frontier import S_PER_DAY, choose, pareto_front
from planner.request.errors import validate_as
from planner.request.schema import Cluster, PlanRequest, Search, Training
from planner.service import Infeasible, plan, problem_from_request, validated

GPU_AXIS = "gpu"
NUMERIC_AXES = ("num_gpus", "global_batch_size")
AXES = (GPU_AXIS, *NUMERIC_AXES)  # the order points are laid out in: GPU type outermost
MAX_POINTS = 32  # values of one axis
MAX_GRID_POINTS = 64  # points of a whole grid
# a point is not started with less time than this left of the sweep's deadline: a solve cut
# that short proves nothing, and its answer would come after the deadline anyway
MIN_POINT_S = 0.5
# cluster fields that describe one GPU type: a sweep over types takes each type's own
PER_GPU_FIELDS = ("gpus_per_node", "nvlink_domain", "intra_node_gb_s", "inter_node_gb_s", "system", "network",
                  "intra_node_latency_s", "inter_node_latency_s", "profile_id", "price_per_gpu_hour")

Coords = dict[str, Any]  # one point: axis -> value


def with_coords(req: PlanRequest, coords: Coords) -> PlanRequest:
    """The request of one point: each swept field set, the block that holds it validated
    again (the value is new input: a GPU count past the limit is refused by name), and the
    search asked for the best plan alone."""
    cluster, training = dict(req.cluster), dict(req.training)
    if GPU_AXIS in coords:
        cluster["gpu"] = coords[GPU_AXIS]
    if "num_gpus" in coords:
        cluster["num_gpus"] = coords["num_gpus"]
        if cluster["gpus_per_node"] is not None and cluster["gpus_per_node"] > coords["num_gpus"]:
            cluster["gpus_per_node"] = coords["num_gpus"]  # a sweep may start below one node
    if "global_batch_size" in coords:
        training["global_batch_size"] = coords["global_batch_size"]
    # a point reports its best plan only: the runners-up (search.top_k) are not shown by a
    # sweep, and keeping them costs the search a quarter to a third more time (llama3-70b on
    # 512 h100-sxm: 4.3 s instead of 5.7 s of CPU, the same optimum; docs/results.md)
    update: dict[str, Any] = {"search": (req.search or Search()).model_copy(update={"top_k": 1})}
    if GPU_AXIS in coords or "num_gpus" in coords:
        update["cluster"] = validate_as(Cluster, cluster, "cluster")
    if "global_batch_size" in coords:
        update["training"] = validate_as(Training, training, "training")
    return req.model_copy(update=update)


def parse_axis(axis: str, values: Any) -> list:
    """One axis's values, checked: GPU names (catalog, in the order given) or integers >= 1
    (sorted)."""
    if axis not in AXES:
        raise SpecError("sweep", f"axis must be one of {', '.join(AXES)}, got {axis!r}", allowed=list(AXES))
    if not isinstance(values, list | tuple) or not values:
        kind = "GPU names" if axis == GPU_AXIS else "integers"
        raise SpecError(f"sweep.{axis}", f"must be a non-empty list of {kind}")
    if len(values) > MAX_POINTS:
        raise SpecError(f"sweep.{axis}", f"at most {MAX_POINTS} values, got {len(values)}", allowed=f"1..{MAX_POINTS} values")
    if axis == GPU_AXIS:
        names: list[str] = []
        for v in values:
            if not isinstance(v, str):
                raise SpecError(f"sweep.{axis}", f"values must be catalog GPU names, got {v!r}")
            name = get_gpu(v).name  # unknown: SpecError with the catalog and a did-you-mean
            if name not in names:
                names.append(name)
        return names
    out = []
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SpecError(f"sweep.{axis}", f"values must be integers >= 1, got {v!r}", allowed=">= 1")
        out.append(v)
    return sorted(set(out))


def parse_axes(axes: dict[str, Any]) -> dict[str, list]:
    """{axis: values} -> the checked axes in AXES order: `gpu` and/or one numeric axis."""
    unknown = [a for a in axes if a not in AXES]
    if unknown:
        raise SpecError("sweep", f"unknown axis {unknown[0]!r}", allowed=list(AXES))
    numeric = [a for a in NUMERIC_AXES if a in axes]
    if len(numeric) > 1:
        raise SpecError("sweep", "sweep one of num_gpus and global_batch_size at a time (with or without gpu)",
                        allowed=["gpu", "num_gpus", "global_batch_size", "gpu + num_gpus", "gpu + global_batch_size"])
    if not axes:
        raise SpecError("sweep", "give at least one axis", allowed=list(AXES))
    out = {a: parse_axis(a, axes[a]) for a in AXES if a in axes}
    n = 1
    for values in out.values():
        n *= len(values)
    if n > MAX_GRID_POINTS:
        raise SpecError("sweep", f"at most {MAX_GRID_POINTS} points in a grid, got {n}", allowed=f"1..{MAX_GRID_POINTS}")
    return out


def grid_coords(axes: dict[str, list]) -> list[Coords]:
    """Every point of the grid, the first axis outermost."""
    names = list(axes)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes.values())]


def _head(coords: Coords) -> dict[str, Any]:
    """What identifies a point in the answer: its coordinates, and `value` in a one-axis sweep."""
    head = dict(coords)
    if len(coords) == 1:
        head["value"] = next(iter(coords.values()))
    return head


def point(req: PlanRequest, coords: Coords, profile=None, time_limit_s: float | None = None,
          prices: dict[str, GpuPrice] | None = None) -> dict[str, Any]:
    """One point of a sweep: the plan's numbers and economics, or why there is none. A
    top-level function of picklable arguments: the service's pool may run it in a worker
    process."""
    head = _head(coords)
    try:
        p = plan(with_coords(req, coords), profile, time_limit_s, prices=prices).model_dump(mode="json")
    except Infeasible as exc:
        return {**head, "ok": False, "error": exc.message}
    except SpecError as exc:  # this point makes the request invalid (e.g. not whole nodes, no fp8 on the GPU)
        return {**head, "ok": False, "error": str(exc)}
    pred = p["prediction"]
    return {
        **head, "ok": True, "plan_id": p["id"], "gpu": p["cluster"]["gpu"], "num_gpus": p["cluster"]["num_gpus"],
        "global_batch_size": p["training"]["global_batch_size"], "parallelism": p["parallelism"],
        "step_time_s": pred["step_time_s"], "tokens_per_s": pred["tokens_per_s"], "mfu": pred["mfu"],
        "peak_gib": pred["memory"]["peak_gib"], "status": p["status"], "gap": p["search"]["gap"],
        "solve_time_s": p["search"]["solve_time_s"], "timed_out": p["search"]["timed_out"],
        "simulated_step_time_s": (p.get("schedule") or {}).get("simulated_step_time_s"),
        "economics": _sweep_economics(p["economics"], coords),
    }


def _sweep_economics(e: dict[str, Any], coords: Coords) -> dict[str, Any]:
    """The plan's economics; in a sweep over GPU types, a missing price says where a sweep
    takes one (cluster.price_per_gpu_hour is one price for one GPU type: check_grid refuses it)."""
    if GPU_AXIS in coords and e.get("usd_per_gpu_h") is None:
        e = {**e, "reasons": [*e.get("reasons", []), "a sweep over GPU types takes each GPU's price from "
                              "planner sweep --prices FILE or REST sweep.prices"]}
    return e


def failed_point(coords: Coords, error: str) -> dict[str, Any]:
    """A point without a plan, and why (a solve that did not finish, say)."""
    return {**_head(coords), "ok": False, "error": error}


def skipped_point(coords: Coords | int, deadline_s: float) -> dict[str, Any]:
    """A point the sweep's deadline left no time for (`coords` an int: a one-axis sweep's value)."""
    head = {"value": coords} if isinstance(coords, int) else _head(coords)
    return {**head, "ok": False, "skipped": True,
            "error": f"skipped: the sweep's {deadline_s:g} s deadline was reached before this point"}


def point_limit_s(time_limit_s: float | None, left_s: float | None) -> float | None:
    """A point's time limit: the per-solve limit capped by what is left of the deadline."""
    if left_s is None:
        return time_limit_s
    return left_s if time_limit_s is None else min(time_limit_s, left_s)


def check_grid(req: PlanRequest, axes: dict[str, list], deadline_days: float | None = None,
               budget_usd: float | None = None) -> None:
    """Raise SpecError for a grid request that is bad whatever the point: per-GPU facts in a
    sweep over GPU types, no token budget where the sweep compares times and costs, a bad
    deadline or budget, or a request that is bad at every point (the first point's error).
    A request bad at some points only is planned: those points keep their reason."""
    if GPU_AXIS in axes:
        given = [f for f in PER_GPU_FIELDS if getattr(req.cluster, f) is not None]
        if given:
            f = given[0]
            hint = ("give each GPU's price in a prices table (planner sweep --prices FILE, REST sweep.prices)"
                    if f == "price_per_gpu_hour" else "each GPU type's own comes from the catalog (GET /v1/gpus)")
            raise SpecError(f"cluster.{f}", f"describes one GPU type; a sweep over GPU types cannot apply it "
                            f"to {', '.join(axes[GPU_AXIS])}: {hint}")
    for name, v in (("sweep.deadline_days", deadline_days), ("sweep.budget_usd", budget_usd)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or v == float("inf")):
            raise SpecError(name, f"must be a number > 0, got {v!r}", allowed="> 0")
    compares = GPU_AXIS in axes or deadline_days is not None or budget_usd is not None
    if compares and req.training.total_tokens is None:
        why = "a sweep over GPU types compares" if GPU_AXIS in axes else "a deadline or budget is checked against"
        raise SpecError("training.total_tokens", f"is required: {why} the time to train and its cost, which "
                        "need the tokens to train on (planner sweep --total-tokens N)", allowed=">= 1")
    first: SpecError | None = None
    for coords in grid_coords(axes):  # parsing only (milliseconds a point): no search
        try:
            problem_from_request(with_coords(req, coords))
            return
        except SpecError as exc:
            first = first or exc
    if first is not None:
        raise first


def header(req: PlanRequest, axis_or_axes: str | dict[str, list], values: list | None = None) -> dict[str, Any]:
    """What the sweep varied and what it held fixed. One axis: {axis, values, ...} as before;
    a grid: {axes, ...} as well."""
    axes = {axis_or_axes: values or []} if isinstance(axis_or_axes, str) else axis_or_axes
    cluster, training = req.cluster, req.training
    fixed = {"GPUs": cluster.num_gpus, "batch": training.global_batch_size, "seq": training.seq_length}
    for axis, name in (("num_gpus", "GPUs"), ("global_batch_size", "batch")):
        if axis in axes:
            fixed.pop(name)
    if training.total_tokens is not None:
        fixed["tokens"] = training.total_tokens
    gpu = cluster.gpu
    out: dict[str, Any] = {
        "axes": axes,
        "model": req.model.name or "model",
        "gpu": (", ".join(axes[GPU_AXIS]) if GPU_AXIS in axes
                else gpu if isinstance(gpu, str) else gpu.name or gpu.base or "custom" if gpu is not None
                else cluster.system),
        "fixed": fixed,
    }
    if len(axes) == 1:
        (axis, vals), = axes.items()
        out = {"axis": axis, "values": vals, **out}
    return out


def finish(req: PlanRequest, axes: dict[str, list], points: list[dict[str, Any]],
           deadline_days: float | None = None, budget_usd: float | None = None) -> dict[str, Any]:
    """The sweep's answer: the header, the points (each marked on_front / chosen), the front
    (indices, fastest first), the chosen point's index and the sentence that says why."""
    front = pareto_front(points)
    chosen, why = choose(points, deadline_days, budget_usd)
    on = set(front)
    for i, p in enumerate(points):
        p["on_front"] = i in on
        p["chosen"] = i == chosen
    return {**header(req, axes), "deadline_days": deadline_days, "budget_usd": budget_usd,
            "points": points, "front": front, "chosen": chosen, "choice": why}


def grid(req: PlanRequest | dict, axes: dict[str, Any], profile=None, time_limit_s: float | None = None,
         deadline_s: float | None = None, prices: dict[str, GpuPrice] | None = None,
         deadline_days: float | None = None, budget_usd: float | None = None, jobs: int = 1) -> dict[str, Any]:
    """Plan `req` at every point of the grid `axes` ({axis: values}); returns finish()'s answer.
    `deadline_s`: the whole sweep stops starting points once less than MIN_POINT_S is left.
    `jobs` > 1 plans that many points at once in worker processes (no deadline then: each
    point has its own `time_limit_s`)."""
    req = validated(req, PlanRequest)
    parsed = parse_axes(axes)
    check_grid(req, parsed, deadline_days, budget_usd)
    coords = grid_coords(parsed)
    if jobs > 1 and deadline_s is None and len(coords) > 1:
        points = _parallel(req, coords, profile, time_limit_s, prices, jobs)
    else:
        points = _in_turn(req, coords, profile, time_limit_s, deadline_s, prices)
    return finish(req, parsed, points, deadline_days, budget_usd)


def _in_turn(req, coords: list[Coords], profile, time_limit_s, deadline_s, prices) -> list[dict[str, Any]]:
    start_s = time.monotonic()
    points = []
    for c in coords:
        left_s = None if deadline_s is None else deadline_s - (time.monotonic() - start_s)
        if left_s is not None and left_s < MIN_POINT_S:
            points.append(skipped_point(c, deadline_s))
            continue
        points.append(point(req, c, profile, point_limit_s(time_limit_s, left_s), prices))
    return points


def _parallel(req, coords: list[Coords], profile, time_limit_s, prices, jobs: int) -> list[dict[str, Any]]:
    """The points planned `jobs` at a time in worker processes, answered in grid order."""
    with ProcessPoolExecutor(max_workers=min(jobs, len(coords))) as ex:
        futures = [ex.submit(point, req, c, profile, time_limit_s, prices) for c in coords]
        return [f.result() for f in futures]


def sweep(req: PlanRequest | dict, axis: str, values, profile=None, time_limit_s: float | None = None,
          deadline_s: float | None = None) -> dict[str, Any]:
    """Plan `req` at each value of one axis (a grid of one axis); returns {axis, values,
    model, gpu, fixed, points, front, chosen, choice}."""
    return grid(req, {axis: values}, profile, time_limit_s, deadline_s)


def _step(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"


def table(result: dict) -> str:
    """The sweep as a text table (what `planner sweep` prints). A sweep with economics adds
    days to train, cost and the front/chosen marks, and ends with the choice."""
    axes = result.get("axes") or {result["axis"]: result["values"]}
    priced = any((p.get("economics") or {}).get("time_to_train_s") is not None for p in result["points"])
    heads = [("gpu", "GPU", 9)] if GPU_AXIS in axes else []
    heads += [(a, {"num_gpus": "GPUs", "global_batch_size": "batch"}[a], 7) for a in NUMERIC_AXES if a in axes]
    key = " ".join(f"{h:>{w}s}" for _, h, w in heads)
    head = (f"{key} {'dp':>4s} {'tp':>3s} {'pp':>3s} {'cp':>3s} {'ep':>3s} {'vpp':>3s} {'mb':>3s} {'zero':>4s} "
            f"{'recompute':>9s} {'schedule':>11s} {'step':>10s} {'tokens/s':>11s} {'MFU':>6s} {'mem GiB':>8s}")
    if priced:
        head += f" {'days':>8s} {'cost USD':>14s}  "
    lines = [head]
    for p in result["points"]:
        ident = " ".join(f"{p.get(a, '')!s:>{w}s}" for a, _, w in heads)
        if not p["ok"]:
            lines.append(f"{ident}  no plan: {p['error']}")
            continue
        par = p["parallelism"]
        line = (
            f"{ident} {par['dp']:>4d} {par['tp']:>3d} {par['pp']:>3d} {par['cp']:>3d} {par['ep']:>3d} {par['vpp']:>3d} "
            f"{par['micro_batch_size']:>3d} {par['zero']:>4d} {par['recompute']:>9s} {par['schedule']:>11s} "
            f"{_step(p['step_time_s']):>10s} {p['tokens_per_s']:>11,.0f} {p['mfu'] * 100:>5.1f}% {p['peak_gib']:>8.1f}"
        )
        if priced:
            e = p.get("economics") or {}
            t, c = e.get("time_to_train_s"), e.get("cost_usd")
            days = "-" if t is None else f"{t / S_PER_DAY:.1f}"
            cost = "no price" if c is None else f"{c:,.0f}"
            mark = "*" if p.get("chosen") else ("f" if p.get("on_front") else " ")
            line += f" {days:>8s} {cost:>14s} {mark}"
        lines.append(line)
    if priced:
        lines.append("f: on the time/cost front, *: chosen. " + result.get("choice", ""))
    return "\n".join(lines)
