"""`planner sweep`: plan one model over a list of GPU counts or global batch sizes; prints
a table and writes the scaling picture (SVG)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cost_model.specs.errors import SpecError

from .common import load_profile_arg, print_json, request_from_args
from .flags import add_flags


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def register(sub) -> None:
    p = sub.add_parser("sweep", help="plan over a list of GPU counts or batch sizes; table + scaling SVG")
    add_flags(p, "problem", "config", "search", "output")
    # the swept flags take comma-separated lists here (one value plans a single point)
    for action in p._actions:
        if action.dest in ("gpus", "global_batch"):
            action.type = _int_list
            action.metavar = "N[,N...]"
    p.add_argument("--out", metavar="FILE", default="sweep.svg", help="scaling picture (default sweep.svg)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner.report import scaling_svg  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))
    from planner.sweep import sweep, table  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

    gpus, batches = args.gpus or [], args.global_batch or []
    if len(gpus) > 1 and len(batches) > 1:
        raise SpecError("--gpus", "sweep one axis at a time: give several --gpus or several --global-batch values, not both")
    axis, values = ("global_batch_size", batches) if len(batches) > 1 else ("num_gpus", gpus)
    args.gpus = gpus[0] if gpus else None
    args.global_batch = batches[0] if batches else None
    req = request_from_args(args, "plan")  # --time-limit is each point's search limit
    if not values:
        raise SpecError("--gpus", "give the GPU counts (or batch sizes) to sweep, e.g. --gpus 64,128,256")
    result = sweep(req, axis, values, load_profile_arg(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(scaling_svg(result))
    print(f"wrote {out}", file=sys.stderr)
    if args.json:
        print_json(result)
    else:
        print(table(result))
    return 0 if any(p["ok"] for p in result["points"]) else 1


__all__ = ["register", "run"]
