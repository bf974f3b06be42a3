"""`planner plan`: the best plan (and alternatives) for a model on a cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cost_model.specs import vocab as V

from .common import (
    fmt_s,
    interval_s,
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


def layout(par) -> str:
    """A layout on one line: the degrees, then micro-batches, sharding, recompute, schedule."""
    extras = [f"vpp={par['vpp']}"] if par["vpp"] > 1 else []
    extras += ["sp"] if par["sequence_parallel"] else []
    extras += ["moe-a2a-overlap"] if par.get("moe_a2a_overlap") else []
    extras += ["optimizer-offload"] if par.get("optimizer_offload") else []
    if par.get("activation_offload", V.ACT_OFFLOAD_NONE) != V.ACT_OFFLOAD_NONE:
        extras.append(f"activation-offload={par['activation_offload']}")
    if par.get("moe_dispatcher", V.DISPATCHER_ALLTOALL) != V.DISPATCHER_ALLTOALL:
        extras.append(f"moe-dispatcher={par['moe_dispatcher']}")
    return (f"dp={par['dp']} tp={par['tp']} pp={par['pp']} cp={par['cp']} ep={par['ep']}"
            + (f" ({', '.join(extras)})" if extras else "")
            + f", micro-batch {par['micro_batch_size']} x {par['num_micro_batches']}, ZeRO-{par['zero']}"
            + (f" in {par['dp_replicate']} replicas" if par.get("dp_replicate", 1) > 1 else "") + ", "
            f"recompute {par['recompute']}, schedule {par['schedule']}")


def _mfu(pred) -> str:
    """MFU against the bf16 peak; an fp8 run's against the fp8 peak beside it."""
    fp8 = pred.get("mfu_fp8_peak")
    return f"MFU {pred['mfu'] * 100:.1f}% of bf16 peak" + (f" ({fp8 * 100:.1f}% of fp8 peak)" if fp8 is not None else "")


def _search_line(plan) -> str:
    s = plan["search"]
    limit = f" of {s['time_limit_s']:g} s limit" if s.get("time_limit_s") else ""
    out = f"{'timed out' if s['timed_out'] else 'done'} in {s['solve_time_s']:.2f} s{limit}"
    return (f"search: {plan['status']}, gap {s['gap'] * 100:.2f}%, {out} "
            f"({s['candidates']:,} candidates, {s['pruned']:,} pruned)")


def print_summary(plan, emitted: str | None = None) -> None:
    """The plan for people, in a few lines: the layout, the prediction, the runners-up (one
    line each, with how much slower), where --emit wrote, and how the search ended."""
    par, pred, m, c = plan["parallelism"], plan["prediction"], plan["prediction"]["memory"], plan["cluster"]
    print(f"plan {plan['id']}: {plan['model']['name']} on {c['num_gpus']} x {c['gpu']} ({plan['engine']}, "
          f"{plan['training']['dtype']})")
    print(f"  {layout(par)}")
    print(f"  step {interval_s(pred)}, {pred['tokens_per_s']:,.0f} tokens/s, {_mfu(pred)}, "
          f"memory {m['peak_gib']:.1f} (upper bound {m['peak_upper_gib']:.1f}) / {m['capacity_gib']:.1f} GiB per GPU")
    if plan.get("economics"):
        print_economics(plan["economics"])
    best_s = pred["step_time_s"]
    for a in plan["alternatives"]:
        t = a["prediction"]["step_time_s"]
        print(f"  alt +{(t / best_s - 1) * 100:.1f}% ({fmt_s(t)}): {layout(a['parallelism'])}")
    if emitted:
        print(f"  wrote {emitted}")
    print(f"  {_search_line(plan)}")
    print("  (--json: the full plan with reasons and stages; --compact: without launch artifacts, ranks, schedule, stages)")


def print_economics(e: dict) -> None:
    """One line of the run's economics: what is known of steps, time, cost and tokens per dollar;
    why the rest is unknown only where a token budget was given (--json has every reason)."""
    parts = []
    if e["steps"] is not None:
        band = (f" (p10-p90 {e['time_to_train_h_p10']:,.1f}-{e['time_to_train_h_p90']:,.1f} h)"
                if e.get("time_to_train_h_p10") is not None else "")
        parts.append(f"{e['steps']:,} steps, {e['time_to_train_h']:,.1f} h to train{band} (goodput {e['goodput']:g})")
    if e["cost_usd"] is not None:
        band = (f" (p10-p90 ${e['cost_usd_p10']:,.0f}-${e['cost_usd_p90']:,.0f})"
                if e.get("cost_usd_p10") is not None else "")
        parts.append(f"${e['cost_usd']:,.0f}{band}")
    if e["usd_per_gpu_h"] is not None:
        parts.append(f"{e['tokens_per_dollar']:,.0f} tokens/$ at ${e['usd_per_gpu_h']:g}/GPU-hour ({e['price_source']})")
    print("  cost: " + ("; ".join(parts) if parts else "unknown"))
    for r in e["reasons"] if e["steps"] is not None else []:
        print(f"    - {r}")


def run(args: argparse.Namespace) -> int:
    from planner.service import Infeasible  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))
    from planner.service import plan as plan_request  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

    req = request_from_args(args, "plan")
    try:
        plan = plan_request(req, load_profile_arg(args), exhaustive=args.exhaustive, progress=progress,
                            prices=load_prices_arg(args))
    except Infeasible as exc:
        if args.json or args.compact:
            print_json({"error": {"code": "infeasible", "message": exc.message, "details": exc.details}})
        print(f"infeasible: {exc.message}", file=sys.stderr)
        for s in exc.details.get("suggestions", []):
            print(f"  - {s}", file=sys.stderr)
        return 1
    emitted = None
    if args.emit:
        from planner.launch import write_artifacts  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

        paths = write_artifacts(plan, Path(args.emit))
        from planner.report import write_report  # report.html + the SVGs beside plan.json  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

        paths += write_report(plan, Path(args.emit))
        emitted = (f"{len(paths)} files to {args.emit}: plan.json, the launch artifacts, the SVG pictures and the "
                   f"report {Path(args.emit) / 'report.html'}")
        if args.json or args.compact:  # stdout is the JSON; the summary says it otherwise
            print(f"wrote {emitted}", file=sys.stderr)
    if args.compact:
        print_json(plan.compact_dict())
    elif args.json:
        print_json(plan.model_dump(mode="json"))
    else:
        print_summary(plan, emitted)
    return 0
