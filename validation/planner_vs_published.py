"""The planner against every published run of ../shared/validation/published_runs.csv: on
the same GPUs, batch and sequence length, does the planner find a configuration the cost
model predicts at least as fast as the published one, and does it pick the published
tp/pp/dp? The published configuration is costed exactly as validation/published.py does
(same model/training rules, `predict_row`).

Usage: python validation/planner_vs_published.py [--csv PATH] [--time-limit S] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published import DEFAULT_CSV, predict_row, published_time_s, row_specs  # noqa: E402

from cost_model.specs.vocab import MODEL_TRANSFORMER  # noqa: E402
from planner import service
from planner.service import Infeasible  # noqa: E402


def row_request(row: dict, time_limit: float) -> dict:
    model, cluster, training, _year = row_specs(row)
    tf = {k: v for k, v in asdict(model).items() if v is not None}
    return {
        "model": {MODEL_TRANSFORMER: tf},
        "cluster": {"gpu": cluster.gpu.name, "num_gpus": cluster.num_gpus, "gpus_per_node": cluster.gpus_per_node},
        "training": {"global_batch_size": training.global_batch_size, "seq_length": training.seq_length,
                     "dtype": training.dtype, "attention": training.attention},
        "search": {"time_limit_s": time_limit, "top_k": 3},
    }


def degrees(d) -> str:
    g = (lambda k: d[k]) if isinstance(d, dict) else (lambda k: getattr(d, k))
    return f"{g('tp')}/{g('pp')}/{g('dp')}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--time-limit", type=float, default=15.0, help="search.time_limit_s per row")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(args.csv.open()))
    out = []
    t_all = time.perf_counter()
    for row in rows:
        name = f'{row["table_ref"]} {row["model"]}'
        r: dict = {"row": name, "gpus": int(row["num_gpus"]), "published_s": published_time_s(row)}
        best = predict_row(row)
        if best is None:
            r["error"] = "published configuration not valid in the cost model"
            out.append(r)
            continue
        _, cfg, est = best
        r.update(published_degrees=degrees(cfg), published_cfg_s=est.prediction.step_time_s, published_fits=est.fits)
        t0 = time.perf_counter()
        try:
            plan = service.plan(row_request(row, args.time_limit))
        except Infeasible as exc:
            r["error"] = f"planner: {exc.message}"
            out.append(r)
            continue
        par = plan["parallelism"]
        r.update(
            planner_degrees=degrees(par), planner_s=plan["prediction"]["step_time_s"], status=plan["status"],
            gap=plan["search"]["gap"], solve_wall_s=time.perf_counter() - t0,
            planner_cfg={k: par[k] for k in ("cp", "ep", "vpp", "micro_batch_size", "zero", "recompute", "sequence_parallel")},
        )
        r["faster_or_equal"] = r["planner_s"] <= r["published_cfg_s"] * (1 + 1e-9)
        r["same_degrees"] = (par["tp"], par["pp"], par["dp"]) == (cfg.tp, cfg.pp, cfg.dp)
        if not r["same_degrees"]:
            why = list(plan["reasons"])
            why += [f"alternative {degrees(a['parallelism'])}: {a['reason']}" for a in plan["alternatives"]]
            r["why"] = why
        out.append(r)
    ok = [r for r in out if "planner_s" in r]
    faster = sum(r["faster_or_equal"] for r in ok)
    same = sum(r["same_degrees"] for r in ok)
    total = time.perf_counter() - t_all
    if args.json:
        print(json.dumps({"rows": out, "compared": len(ok), "faster_or_equal": faster, "same_degrees": same,
                          "wall_s": total}, indent=1, default=str))
        return 0
    print(f"{'row':40s} {'gpus':>5s} {'pub tp/pp/dp':>12s} {'plan tp/pp/dp':>13s} {'plan_s':>8s} {'pubcfg_s':>8s} "
          f"{'speedup':>7s} {'faster':>6s} {'same':>5s} {'status':>8s}")
    for r in out:
        if "planner_s" not in r:
            print(f"{r['row'][:40]:40s} {r['gpus']:5d} {r.get('published_degrees', '-'):>12s}  {r['error']}")
            continue
        print(f"{r['row'][:40]:40s} {r['gpus']:5d} {r['published_degrees']:>12s} {r['planner_degrees']:>13s} "
              f"{r['planner_s']:8.2f} {r['published_cfg_s']:8.2f} {r['published_cfg_s'] / r['planner_s']:7.3f} "
              f"{'yes' if r['faster_or_equal'] else 'NO':>6s} {'yes' if r['same_degrees'] else 'no':>5s} {r['status']:>8s}")
    print(f"\nrows compared: {len(ok)} of {len(out)}; planner at least as fast: {faster}; "
          f"same tp/pp/dp as published: {same}; wall {total:.0f} s")
    differing = [r for r in ok if not r["same_degrees"]]
    if differing:
        print("\nwhy the planner differs:")
        for r in differing:
            c = r["planner_cfg"]
            print(f"- {r['row']}: published {r['published_degrees']} -> planner {r['planner_degrees']} "
                  f"(cp={c['cp']} vpp={c['vpp']} mb={c['micro_batch_size']} zero={c['zero']} recompute={c['recompute']} "
                  f"sp={c['sequence_parallel']}), {r['published_cfg_s'] / r['planner_s']:.3f}x")
            for line in r["why"][:4]:
                print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
