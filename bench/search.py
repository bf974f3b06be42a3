"""Planner search timing on large instances (all knobs open).

Times `planner.service.plan` N times per instance and prints the median wall time, status, gap,
search counters and the chosen plan.

Usage: python bench/search.py [--repeats N] [--time-limit S] [--gap-limit F] [--cp-comm LIST] [--moe-dispatcher LIST]
                              [--only NAME] [--json] [--counters]

--gap-limit: search.gap_limit (default 0: the search proves its plan optimal).
--cp-comm: search.cp_comm, comma-separated variants to search (default: the engine's, p2p).
--moe-dispatcher: search.moe_dispatcher, comma-separated (default: alltoall alone; alltoall,deepep
adds DeepEP where the cluster runs it).

--counters: also run planner.search.search once per instance and print its own counters
(degree groups expanded / pruned whole, candidates, memory / time prunes, CP-SAT solves
and time, candidates proven by their bound, solves deferred, status and gap): on a shared machine they say where the time
goes better than the wall clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from planner import service
from planner.search import search
from planner.service import Infeasible, problem_from_request

CASES = {
    "gpt3-175b/1024xA100-80GB": ({"name": "gpt3-175b"}, "a100-80gb", 1024, 1536, 2048),
    "llama3-70b/64xH100": ({"name": "llama3-70b"}, "h100-sxm", 64, 128, 8192),
    "llama3-405b/16384xH100": ({"name": "llama3-405b"}, "h100-sxm", 16384, 2048, 8192),
    "mixtral-8x22b/256xH100": ({"name": "mixtral-8x22b"}, "h100-sxm", 256, 256, 4096),
    # DeepSeek-V3 technical report §3.1/§4.2: 2048 H800, batch ramped to 15360 sequences of 4K
    "deepseek-v3/2048xH800": ({"name": "deepseek-v3"}, "h800", 2048, 15360, 4096),
    # Qwen3 publishes no batch: 1024 sequences of 4K (4M tokens) on 32 nodes
    "qwen3-235b-a22b/256xH100": ({"name": "qwen3-235b-a22b"}, "h100-sxm", 256, 1024, 4096),
}


def request(case: str, time_limit: float | None, gap_limit: float | None = None, cp_comm: list[str] | None = None,
            moe_dispatcher: list[str] | None = None) -> dict:
    model, gpu, n, batch, seq = CASES[case]
    req = {"model": model, "cluster": {"gpu": gpu, "num_gpus": n},
           "training": {"global_batch_size": batch, "seq_length": seq}}
    knobs = {"time_limit_s": time_limit, "gap_limit": gap_limit, "cp_comm": cp_comm, "moe_dispatcher": moe_dispatcher}
    if any(v is not None for v in knobs.values()):
        req["search"] = {k: v for k, v in knobs.items() if v is not None}
    return req


def run_case(case: str, repeats: int, time_limit: float | None, gap_limit: float | None = None,
             cp_comm: list[str] | None = None, moe_dispatcher: list[str] | None = None) -> dict:
    walls, plan, err = [], None, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        try:
            plan = service.plan(request(case, time_limit, gap_limit, cp_comm, moe_dispatcher))
        except Infeasible as exc:
            err = exc.message
        walls.append(time.perf_counter() - t0)
    row = {"case": case, "median_s": statistics.median(walls), "max_s": max(walls)}
    if plan is None:
        row["error"] = err
        return row
    s, par, pred = plan["search"], plan["parallelism"], plan["prediction"]
    row.update(
        status=plan["status"], gap=s["gap"], candidates=s["candidates"], pruned=s["pruned"], ilp_solves=s["ilp_solves"],
        dp=par["dp"], tp=par["tp"], pp=par["pp"], cp=par["cp"], cp_comm=par["cp_comm"] or "-", ep=par["ep"], vpp=par["vpp"], sp=par["sequence_parallel"],
        mb=par["micro_batch_size"], zero=par["zero"], recompute=par["recompute"], dispatcher=par["moe_dispatcher"],
        step_s=pred["step_time_s"], mfu=pred["mfu"],
    )
    return row


def counters(case: str, time_limit: float | None, gap_limit: float | None = None, cp_comm: list[str] | None = None,
             moe_dispatcher: list[str] | None = None) -> dict:
    """The search's own counters for one instance (one run)."""
    t0 = time.perf_counter()
    res = search(problem_from_request(request(case, time_limit, gap_limit, cp_comm, moe_dispatcher)))
    s = res.stats
    return {"case": case, "search_s": time.perf_counter() - t0, "status": res.status, "gap": res.gap,
            "groups": s.groups, "groups_expanded": s.groups_expanded, "groups_pruned": s.pruned_groups,
            "candidates": s.candidates, "pruned_memory": s.pruned_memory, "pruned_time": s.pruned_time,
            "ilp_solves": s.ilp_solves, "ilp_s": s.ilp_time_s, "proven_by_bound": s.proven_by_bound, "deferred": s.deferred,
            "timed_out": s.timed_out, "monotone_ok": s.monotone_ok}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, help="search.time_limit_s (default: the planner's 10 s)")
    ap.add_argument("--gap-limit", type=float, help="search.gap_limit (default: 0, prove optimality)")
    ap.add_argument("--cp-comm", type=lambda s: s.split(","), help="search.cp_comm variants (default: the engine's)")
    ap.add_argument("--moe-dispatcher", type=lambda s: s.split(","),
                    help="search.moe_dispatcher (default: alltoall alone)")
    ap.add_argument("--only", choices=sorted(CASES), action="append")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--counters", action="store_true", help="also print the search's own counters")
    args = ap.parse_args(argv)
    knobs = (args.time_limit, args.gap_limit, args.cp_comm, args.moe_dispatcher)
    rows = [run_case(c, args.repeats, *knobs) for c in (args.only or CASES)]
    extra = [counters(c, *knobs) for c in (args.only or CASES)] if args.counters else []
    if args.json:
        print(json.dumps({"rows": rows, "counters": extra} if args.counters else rows, indent=1))
        return 0
    print(f"{'case':28s} {'median_s':>8s} {'status':>8s} {'gap%':>6s} {'cands':>6s} {'pruned':>6s} {'ilp':>4s}  "
          f"{'dp':>4s} {'tp':>2s} {'pp':>3s} {'cp':>2s} {'cp_comm':>10s} {'ep':>2s} {'v':>2s} {'sp':>2s} {'mb':>2s} {'z':>1s} {'recomp':>9s} {'disp':>8s} {'step_s':>8s} {'MFU%':>5s}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:28s} {r['median_s']:8.2f} infeasible: {r['error']}")
            continue
        print(f"{r['case']:28s} {r['median_s']:8.2f} {r['status']:>8s} {r['gap'] * 100:6.2f} {r['candidates']:6d} {r['pruned']:6d} "
              f"{r['ilp_solves']:4d}  {r['dp']:4d} {r['tp']:2d} {r['pp']:3d} {r['cp']:2d} {r['cp_comm']:>10s} {r['ep']:2d} {r['vpp']:2d} "
              f"{'y' if r['sp'] else 'n':>2s} {r['mb']:2d} {r['zero']:1d} {r['recompute']:>9s} {r['dispatcher']:>8s} {r['step_s']:8.3f} "
              f"{r['mfu'] * 100:5.1f}")
    if extra:
        print(f"\n{'case':28s} {'search_s':>8s} {'groups':>6s} {'expand':>6s} {'g_prun':>6s} {'cands':>6s} "
              f"{'p_mem':>6s} {'p_time':>6s} {'ilp':>4s} {'ilp_s':>6s} {'bound':>5s} {'defer':>5s} {'status':>8s} {'gap%':>6s}")
        for r in extra:
            print(f"{r['case']:28s} {r['search_s']:8.2f} {r['groups']:6d} {r['groups_expanded']:6d} {r['groups_pruned']:6d} "
                  f"{r['candidates']:6d} {r['pruned_memory']:6d} {r['pruned_time']:6d} {r['ilp_solves']:4d} "
                  f"{r['ilp_s']:6.2f} {r['proven_by_bound']:5d} {r['deferred']:5d} {r['status']:>8s} {r['gap'] * 100:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
