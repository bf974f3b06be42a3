"""`planner check`: CI gate. Exit 1 when the configuration does not fit or the best plan is
more than --max-slowdown faster."""

from __future__ import annotations

import argparse

from .common import (
    add_config_flags,
    add_problem_flags,
    fmt_s,
    load_profile_arg,
    print_json,
    request_from_args,
)


def register(sub) -> None:
    p = sub.add_parser("check", help="CI gate: does this configuration fit and is it near the best plan?")
    add_problem_flags(p)
    add_config_flags(p)
    p.add_argument("--max-slowdown", type=float, default=0.10, metavar="F", help="allowed slowdown vs the best plan (default 0.10)")
    p.add_argument("--time-limit", type=float, metavar="S", help="search time limit in seconds")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner.service import check as check_request

    req = request_from_args(args, need_parallelism=True)
    res = check_request(req, args.max_slowdown, load_profile_arg(args), args.time_limit)
    if args.json:
        print_json(res.model_dump(mode="json"))
    else:
        e = res["estimate"]["prediction"]
        print(f"{'PASS' if res['ok'] else 'FAIL'}: given config {fmt_s(e['step_time_s'])}, "
              f"{e['memory']['peak_gib']:.1f}/{e['memory']['capacity_gib']:.1f} GiB, {'fits' if res['fits'] else 'does not fit'}")
        if res.get("best"):
            b = res["best"]
            par = b["parallelism"]
            print(f"best plan {fmt_s(b['prediction']['step_time_s'])}: dp={par['dp']} tp={par['tp']} pp={par['pp']} cp={par['cp']} "
                  f"vpp={par['vpp']} mb={par['micro_batch_size']} zero={par['zero']} recompute={par['recompute']}; "
                  f"slowdown {res['slowdown'] * 100:.1f}% (allowed {args.max_slowdown * 100:.0f}%)")
        for r in res["reasons"]:
            print(f"  - {r}")
    return 0 if res["ok"] else 1
