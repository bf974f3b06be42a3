"""`planner plan`: the best plan (and alternatives) for a model on a cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cost_model.specs import vocab as V

from .common import (
    fmt_s,
    load_prices_arg,
    load_profile_arg,
    print_json,
    progress,
    request_from_args,
)
from .flags import add_flags


def register(sub) -> None:
    p = sub.add_parser("plan", help="best plan for a model on a cluster")
    add_flags(p, "problem", "config", "search", "plan", "cost", "output")
    p.set_defaults(func=run)


def print_plan(plan: dict) -> None:
    par, pred = plan["parallelism"], plan["prediction"]
    print(
        f"plan {plan['id']} ({plan['status']}): dp={par['dp']} tp={par['tp']} pp={par['pp']} cp={par['cp']} ep={par['ep']} "
        f"vpp={par['vpp']} sp={'on' if par['sequence_parallel'] else 'off'} zero={par['zero']} "
        f"micro-batch={par['micro_batch_size']} x {par['num_micro_batches']} recompute={par['recompute']} schedule={par['schedule']}"
        + (" moe-a2a-overlap" if par.get("moe_a2a_overlap") else "")
        + (f" moe-dispatcher={par['moe_dispatcher']}"
           if par.get("moe_dispatcher", V.DISPATCHER_ALLTOALL) != V.DISPATCHER_ALLTOALL else "")
    )
    m = pred["memory"]
    print(
        f"step {fmt_s(pred['step_time_s'])}  tokens/s {pred['tokens_per_s']:,.0f}  MFU {pred['mfu'] * 100:.1f}%  "
        f"{pred['tflops_per_gpu']:.1f} TFLOP/s/GPU  memory {m['peak_gib']:.1f}/{m['capacity_gib']:.1f} GiB"
    )
    stages = plan["stages"]
    shown = stages if len(stages) <= 16 else stages[:8] + stages[-4:]
    print(f"{'stage':>5s} {'layers':>9s} {'recompute':>9s} {'time/mb':>10s} {'mem GiB':>8s}")
    for s in shown:
        print(f"{s['index']:5d} {s['layers'][0]:4d}-{s['layers'][1]:<4d} {s['recompute_layers']:9d} {s['time_ms']:8.2f}ms {s['memory_gib']:8.1f}")
    if len(stages) > len(shown):
        print(f"  ... {len(stages) - len(shown)} more stages")
    if plan.get("economics"):
        print_economics(plan["economics"])
    print("why:")
    for r in plan["reasons"]:
        print(f"  - {r}")
    if plan["alternatives"]:
        print("alternatives:")
        for a in plan["alternatives"]:
            print(f"  - {fmt_s(a['prediction']['step_time_s'])}: {a['reason']}")
    s = plan["search"]
    print(
        f"search: {s['candidates']} candidates, {s['pruned']} pruned, {s['ilp_solves']} ILP solves, "
        f"solver {s['solver']} {s['solve_time_s']:.2f}s, gap {s['gap'] * 100:.2f}%"
    )


def print_economics(e: dict) -> None:
    """One line of the run's economics: what is known of steps, time, cost and tokens per dollar."""
    parts = []
    if e["steps"] is not None:
        parts.append(f"{e['steps']:,} steps, {e['time_to_train_h']:,.1f} h to train (goodput {e['goodput']:g})")
    if e["cost_usd"] is not None:
        parts.append(f"${e['cost_usd']:,.0f}")
    if e["usd_per_gpu_h"] is not None:
        parts.append(f"{e['tokens_per_dollar']:,.0f} tokens/$ at ${e['usd_per_gpu_h']:g}/GPU-hour ({e['price_source']})")
    print("cost: " + ("; ".join(parts) if parts else "unknown"))
    for r in e["reasons"]:
        print(f"  - {r}")


def run(args: argparse.Namespace) -> int:
    from planner.service import Infeasible  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))
    from planner.service import plan as plan_request  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

    req = request_from_args(args, "plan")
    try:
        plan = plan_request(req, load_profile_arg(args), exhaustive=args.exhaustive, progress=progress,
                            prices=load_prices_arg(args))
    except Infeasible as exc:
        if args.json:
            print_json({"error": {"code": "infeasible", "message": exc.message, "details": exc.details}})
        print(f"infeasible: {exc.message}", file=sys.stderr)
        for s in exc.details.get("suggestions", []):
            print(f"  - {s}", file=sys.stderr)
        return 1
    if args.emit:
        from planner.launch import write_artifacts  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

        paths = write_artifacts(plan, Path(args.emit))
        from planner.report import write_report  # report.html + the SVGs beside plan.json  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

        paths += write_report(plan, Path(args.emit))
        print(f"wrote {len(paths)} files to {args.emit}", file=sys.stderr)
    if args.json:
        print_json(plan.model_dump(mode="json"))
    else:
        print_plan(plan)
    return 0
