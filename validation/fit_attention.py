"""Fit Megatron-Core's context-parallel ring slowdown (kernels.MEGATRON_RING_ATTENTION_SLOWDOWN:
how much longer the attention kernels take under Transformer Engine's p2p ring than the same
calls alone) on the long-context rows of validation/published_runs_long_context.csv (NeMo /
Megatron-Core, Llama 3 8B on B200 and Llama 2 7B on H100, CP 1 to 32, 4K to 1M tokens).

With CP, causal attention is most of a step (about half at 32K tokens, 97% at 1M), so these
rows measure what the kernels sustain inside the ring. The rows without CP are printed beside
as the check that the single-call kernel model (catalog attention_efficiency) holds without
a ring: a factor that moved them would be an efficiency error, not a ring cost.

Usage: python validation/fit_attention.py [--csv PATH] [--grid 1.0,1.1,...]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from collections import defaultdict
from pathlib import Path
from statistics import fmean

from cost_model.engines import kernels
from cost_model.specs.vocab import ENGINE_MEGATRON

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published_modern as pm  # noqa: E402

DEFAULT_CSV = Path(__file__).resolve().parent / "published_runs_long_context.csv"


def errors(rows: list[dict], slowdown: float) -> list[tuple[dict, float]]:
    """Signed step-time error (%) of each row with the ring slowdown set to `slowdown`."""
    saved = kernels.KERNELS[ENGINE_MEGATRON]
    kernels.KERNELS[ENGINE_MEGATRON] = dataclasses.replace(saved, ring_attention_slowdown=slowdown)
    try:
        out = []
        for row in rows:
            pub = float(row["published_step_s"])
            out.append((row, 100.0 * (pm.predict(row)["predicted_s"] - pub) / pub))
        return out
    finally:
        kernels.KERNELS[ENGINE_MEGATRON] = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--grid", default="1.0,1.1,1.2,1.3,1.35,1.4,1.45,1.5,1.6")
    args = ap.parse_args()
    rows = [r for r in csv.DictReader(args.csv.open()) if pm.engine_of(r) == ENGINE_MEGATRON]
    ring = [r for r in rows if int(r["cp"]) > 1]
    print(f"{len(ring)} rows with CP > 1 fitted, {len(rows) - len(ring)} rows without CP as the check")
    print(f"{'slowdown':>8} {'CP MAPE%':>9} {'CP mean%':>9} {'no-CP mean%':>12}  per GPU (CP rows, mean%)")
    best = None
    for y in (float(x) for x in args.grid.split(",")):
        errs = errors(rows, y)
        cp = [e for r, e in errs if int(r["cp"]) > 1]
        flat = [e for r, e in errs if int(r["cp"]) <= 1]
        cp_by_gpu: dict[str, list[float]] = defaultdict(list)
        for r, e in errs:
            if int(r["cp"]) > 1:
                cp_by_gpu[r["gpu"]].append(e)
        per_gpu = "  ".join(f"{g} {fmean(v):+.1f}" for g, v in sorted(cp_by_gpu.items()))
        mape = fmean(map(abs, cp))
        print(f"{y:8.2f} {mape:9.1f} {fmean(cp):+9.1f} {fmean(flat) if flat else 0.0:+12.1f}  {per_gpu}")
        if best is None or mape < best[1]:
            best = (y, mape)
    print(f"least MAPE on the CP rows: slowdown {best[0]:.2f} ({best[1]:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
