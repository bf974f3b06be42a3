"""`planner check`: CI gate. Exit 1 when the configuration does not fit or the best plan is
more than --max-slowdown faster."""

from __future__ import annotations

import argparse

from .common import fmt_s, interval_s, load_profile_arg, print_json, progress, request_from_args
from .flags import add_flags


def register(sub) -> None:
    p = sub.add_parser("check", help="CI gate: does this configuration fit and is it near the best plan?")
    add_flags(p, "problem", "config", "search", "check", "output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner.service import check as check_request  # noqa: PLC0415 (startup: only commands that plan load the planner (OR-Tools))

    req = request_from_args(args, "check")
    max_slowdown = req.max_slowdown
    res = check_request(req, max_slowdown, load_profile_arg(args), progress=progress)
    if args.json:
        print_json(res.model_dump(mode="json"))
    else:
        e = res["estimate"]["prediction"]
        m = e["memory"]
        print(f"{'PASS' if res['ok'] else 'FAIL'}: given config {interval_s(e)}, "
              f"{m['peak_gib']:.1f} GiB (upper bound {m['peak_upper_gib']:.1f}) of {m['capacity_gib']:.1f} GiB, "
              f"{'fits' if res['fits'] else 'does not fit'} (by the upper bound)")
        if res.get("best"):
            b = res["best"]
            par = b["parallelism"]
            print(f"best plan {fmt_s(b['prediction']['step_time_s'])}: dp={par['dp']} tp={par['tp']} pp={par['pp']} cp={par['cp']} "
                  f"vpp={par['vpp']} mb={par['micro_batch_size']} zero={par['zero']} dp_replicate={par.get('dp_replicate', 1)} "
                  f"recompute={par['recompute']}; "
                  f"slowdown {res['slowdown'] * 100:.1f}% (allowed {max_slowdown * 100:.0f}%)")
        for r in res["reasons"]:
            print(f"  - {r}")
    return 0 if res["ok"] else 1
