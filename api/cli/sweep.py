"""`planner sweep`: plan one model over a list of GPU counts or global batch sizes, or over GPU
types x GPU counts ("choose the cluster": `--gpu h100-sxm,h200,b200 --gpus 64,128
--total-tokens N [--deadline-days D] [--budget USD]`); prints a table and writes the picture
(SVG): the scaling picture for one numeric axis, cost vs time to train when the sweep prices
its points (a GPU list, a deadline or a budget)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cost_model.specs.errors import SpecError

from .common import load_prices_arg, load_profile_arg, print_json, request_from_args
from .flags import add_flags


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _name_list(text: str) -> list[str]:
    return [v for v in text.replace(" ", "").split(",") if v]


def register(sub) -> None:
    p = sub.add_parser("sweep", help="plan over GPU types x GPU counts, or batch sizes; table + SVG (scaling or cost vs time)")
    add_flags(p, "problem", "config", "search", "cost", "output")
    # the swept flags take comma-separated lists here (one value plans a single point)
    for action in p._actions:
        if action.dest in ("gpus", "global_batch"):
            action.type = _int_list
            action.metavar = "N[,N...]"
        if action.dest == "gpu":
            action.type = _name_list
            action.metavar = "GPU[,GPU...]"
            action.help = "GPU type(s), catalog names; several sweep GPU types (needs --total-tokens)"
    g = p.add_argument_group("choosing the cluster")
    g.add_argument("--deadline-days", type=float, metavar="D",
                   help="choose the cheapest point that trains within D days (needs --total-tokens)")
    g.add_argument("--budget", type=float, metavar="USD",
                   help="choose the fastest point that costs at most USD (with --deadline-days: the cheapest within both)")
    g.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="points planned at once in worker processes (default: the CPU count)")
    p.add_argument("--out", metavar="FILE", default="sweep.svg", help="the picture (default sweep.svg)")
    p.set_defaults(func=run)


def axes_from_args(args: argparse.Namespace) -> dict[str, list]:
    """The grid the flags ask for; the swept flags are set back to one value (the first) so the
    request validates as a single plan's."""
    gpu_names, gpus, batches = args.gpu or [], args.gpus or [], args.global_batch or []
    if len(gpus) > 1 and len(batches) > 1:
        raise SpecError("--gpus", "sweep one axis at a time: give several --gpus or several --global-batch values, not both")
    axes: dict[str, list] = {}
    if len(gpu_names) > 1:
        axes["gpu"] = gpu_names
    if len(batches) > 1:
        axes["global_batch_size"] = batches
    elif gpus and (len(gpus) > 1 or axes):
        axes["num_gpus"] = gpus
    args.gpu = gpu_names[0] if gpu_names else None
    args.gpus = gpus[0] if gpus else None
    args.global_batch = batches[0] if batches else None
    return axes


def run(args: argparse.Namespace) -> int:
    from planner.report import cost_time_svg, scaling_svg  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))
    from planner.sweep import GPU_AXIS, grid, table  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

    axes = axes_from_args(args)
    req = request_from_args(args, "plan")  # --time-limit is each point's search limit
    if not axes:
        raise SpecError("--gpus", "give the GPU counts (or batch sizes, or several --gpu types) to sweep, "
                        "e.g. --gpus 64,128,256")
    if args.jobs is not None and args.jobs < 1:
        raise SpecError("--jobs", f"must be >= 1, got {args.jobs}", allowed=">= 1")
    jobs = args.jobs or os.cpu_count() or 1
    result = grid(req, axes, load_profile_arg(args), prices=load_prices_arg(args),
                  deadline_days=args.deadline_days, budget_usd=args.budget, jobs=jobs)
    priced = GPU_AXIS in axes or args.deadline_days is not None or args.budget is not None
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(cost_time_svg(result) if priced else scaling_svg(result))
    print(f"wrote {out}", file=sys.stderr)
    if args.json:
        print_json(result)
    else:
        print(table(result))
    return 0 if any(p["ok"] for p in result["points"]) else 1


__all__ = ["register", "run"]
