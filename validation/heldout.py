"""Held-out error of every fitted constant, the ranking of head-to-head configurations, and
the residual quantiles that give every prediction its interval.

1. Fitted constants (each is fitted in the code to some published rows; FITTED below says
   which rows and which procedure). For each: the in-sample error (the code's value, on the
   rows it was fitted to) and the leave-one-source-out error: the constant refitted by the same
   procedure (least MAPE over a grid; for the fragmentation, the least grid value that covers
   every row) without source S's rows, then S predicted with it. A "source" is one
   publication (the CSV's `source` column; NAR21's tables for the calibration file). Where a
   constant's rows come from a single source there is nothing to refit on without it: those
   constants report leave-one-row-out instead, and the table says so (`unit`).
2. Ranking: over every head-to-head group (one file, one source, one model, one GPU type and
   count, one sequence length and dtype, two or more configurations), the share of pairs whose
   measured seconds per token differ by more than 5% that the model orders as measured, and
   whether the measured best is the predicted best.
3. Residuals: every row's held-out ratio measured / predicted (the LOSO prediction where the
   row was in a constant's fit; the plain prediction otherwise: those rows were never fitted
   to), bucketed by engine x GPU family x regime (cost_model/hardware/intervals.py states the
   regimes). `--write` stores their quantiles in cost_model/hardware/residuals.toml, which
   gives every estimate its p10-p90 step time and memory upper bound.

Usage: python validation/heldout.py [--write] [--json] [--files a.csv,b.csv] [--quick]
(--quick: leaves out validation/published_runs_bridge_archive.csv, which takes minutes)
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

from cost_model.engines import kernels
from cost_model.hardware import catalog, intervals
from cost_model.specs import vocab as V
from cost_model.specs.errors import SpecError
from cost_model.terms import memory as memory_terms
from cost_model.terms import transients
from planner.service import Infeasible

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published as nar  # noqa: E402
import published_modern as pm  # noqa: E402

HERE = Path(__file__).resolve().parent
MODERN_FILES = (
    pm.DEFAULT_CSV,
    HERE / "published_runs_torchtitan_2025.csv",
    HERE / "published_runs_long_context.csv",
    HERE / "published_runs_bridge.csv",
    HERE / "published_runs_bridge_archive.csv",
    HERE / "published_runs_zero_bubble.csv",
)
# validation/published_runs_torchtitan_pipeline.csv stays out of the residuals: its runs are on
# the H100 96 GB part mapped to the 80 GB catalog entry (its notes), whose caching allocator
# reserves against 96 GB; their peaks, 3.5-14% over the prediction, would set every torchtitan
# H100 memory bound to x1.17 (docs/results.md, held-out memory)
RANK_MIN_GAP = 0.05  # pairs whose measured times differ by more than this are ranked


# --------------------------------------------------------------------------- rows


@dataclass
class Row:
    """One published run, as the held-out analysis sees it."""

    file: str
    id: str
    source: str  # the publication (NAR21: its table)
    model: str
    gpu: str  # catalog name the row maps to
    num_gpus: int
    seq_len: int
    dtype: str
    tokens_per_step: int
    engine: str
    moe: bool
    scale_out: bool
    raw: dict = field(repr=False)
    published_s: float | None = None
    published_gib: float | None = None
    # baseline prediction (the code's constants)
    predicted_s: float | None = None
    peak_gib: float | None = None
    error: str | None = None

    @property
    def bucket(self) -> tuple[str, str, str, str]:
        return intervals.bucket_of(self.engine, self.gpu, self.moe, self.scale_out)


def _nar_rows(path: Path) -> list[Row]:
    out = []
    for raw in csv.DictReader(path.open()):
        gpu, n = nar._gpu_name(raw), int(raw["num_gpus"])
        spec = catalog.get_gpu(gpu)
        engine = V.ENGINE_DEEPSPEED if "zero-3" in raw.get("zero_or_distopt", "").lower() else V.ENGINE_MEGATRON
        out.append(Row(
            # the id names the GPU count: Table 2 runs each model at three
            file=path.name, id=f"{raw['table_ref']} {raw['model']} x{n}", source=f"NAR21 {raw['table_ref']}",
            # the head-to-head key: Table 2 names the same model "(ZeRO-3 (no MP))" and "(PTD-P)"
            model=re.sub(r"\s*\(.*\)$", "", raw["model"]), gpu=gpu, num_gpus=n, seq_len=int(raw["seq_len"]),
            dtype=raw.get("precision", ""), tokens_per_step=int(raw["global_batch_seqs"]) * int(raw["seq_len"]),
            engine=engine, moe=False, scale_out=n > (spec.nvlink_domain or int(raw.get("gpus_per_node") or 8)),
            raw=raw, published_s=nar.published_time_s(raw),
        ))
    return out


def _modern_rows(path: Path) -> list[Row]:
    out = []
    for raw in csv.DictReader(path.open()):
        spec = catalog.get_gpu(raw["gpu"].strip())
        n = int(raw["num_gpus"])
        domain = spec.nvlink_domain or pm._int(raw.get("gpus_per_node")) or spec.gpus_per_node
        try:
            moe = pm.is_moe(raw)
        except SpecError:
            moe = bool(pm._int(raw.get("moe_experts")))
        out.append(Row(
            file=path.name, id=raw["id"], source=raw["source"], model=raw["model"] or raw["arch"], gpu=spec.name,
            num_gpus=n, seq_len=int(raw["seq_len"]), dtype=raw["dtype"],
            tokens_per_step=int(raw["global_batch_seqs"]) * int(raw["seq_len"]), engine=pm.engine_of(raw),
            moe=moe, scale_out=n > domain, raw=raw, published_s=pm._float(raw["published_step_s"]),
            published_gib=pm._float(raw.get("peak_mem_gib")),
        ))
    return out


def predict(row: Row) -> tuple[float, float] | None:
    """(step seconds, peak GiB) of the row with the constants as they are now; None where the
    row has no valid configuration."""
    try:
        if "framework" not in row.raw:  # the calibration file's format
            best = nar.predict_row(row.raw)
            if best is None:
                return None
            est = best[2]
            return est.prediction.step_time_s, est.prediction.memory.peak_gib
        p = pm.predict(row.raw)
        return p["predicted_s"], p["peak_gib"]
    except (SpecError, Infeasible):
        return None


# --------------------------------------------------------------------------- fitted constants


@contextlib.contextmanager
def _catalog_fields(names: Sequence[str], **fields) -> Iterator[None]:
    """The catalog entries `names` with `fields` replaced, for the duration."""
    saved = {n: catalog.CATALOG[n] for n in names}
    try:
        for n in names:
            catalog.CATALOG[n] = dataclasses.replace(saved[n], **fields)
        yield
    finally:
        catalog.CATALOG.update(saved)


@contextlib.contextmanager
def _attr(obj, name: str, value) -> Iterator[None]:
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


@contextlib.contextmanager
def _ring_slowdown(value: float) -> Iterator[None]:
    saved = kernels.KERNELS[V.ENGINE_MEGATRON]
    kernels.KERNELS[V.ENGINE_MEGATRON] = dataclasses.replace(saved, ring_attention_slowdown=value)
    try:
        yield
    finally:
        kernels.KERNELS[V.ENGINE_MEGATRON] = saved


@contextlib.contextmanager
def _fragmentation(value: float) -> Iterator[None]:
    with _attr(memory_terms, "ALLOCATOR_FRAGMENTATION", value), _attr(transients, "FRAGMENTATION_FRACTION", value):
        yield


def _a100(value: tuple[float, float]):
    eta, d_half = value
    return _catalog_fields(("a100-40gb", "a100-80gb"), gemm_max_efficiency=eta, gemm_half_dim=d_half)


_HOPPER = tuple(n for n in catalog.CATALOG if intervals.family_of(n) == "hopper")
_TT_500W = "500 w"  # the 96 GB H100 at 500 W (published_modern.device_for_row)


@dataclass(frozen=True)
class Fitted:
    """A constant fitted to published rows: where it lives, its value in the code, the grid
    the refit searches (the code's value among them), the rows it was fitted on, the metric
    (time or memory) and the procedure: least MAPE, or (cover) the least value whose
    prediction is at or above every row."""

    name: str
    where: str
    value: object
    grid: tuple
    rows: Callable[[Row], bool]
    apply: Callable[[object], contextlib.AbstractContextManager]
    metric: str = "time"
    procedure: str = "mape"


FITTED: tuple[Fitted, ...] = (
    Fitted("A100 GEMM (eta_max, d_half)", "cost_model/hardware/catalog.py _AMPERE",
           (catalog.CATALOG["a100-80gb"].gemm_max_efficiency, catalog.CATALOG["a100-80gb"].gemm_half_dim),
           tuple((e, d) for e in (0.62, 0.66, 0.70, 0.74, 0.78) for d in (32.0, 64.0, 128.0)),
           lambda r: r.file == nar.DEFAULT_CSV.name and "framework" not in r.raw, _a100),
    Fitted("H100_500W_CLOCK", "validation/published_modern.py", pm.H100_500W_CLOCK,
           tuple(round(0.80 + 0.02 * i, 2) for i in range(11)),
           lambda r: r.file == pm.DEFAULT_CSV.name and r.engine == V.ENGINE_TORCHTITAN and not r.moe
           and _TT_500W in r.raw.get("gpu_published", "").lower(),
           lambda v: _attr(pm, "H100_500W_CLOCK", v)),
    Fitted("Hopper sdpa_attention_efficiency", "cost_model/hardware/catalog.py _HOPPER_EFF",
           catalog.CATALOG["h100-sxm"].sdpa_attention_efficiency, (0.30, 0.35, 0.40, 0.45, 0.50, 0.55),
           lambda r: r.file == pm.DEFAULT_CSV.name and r.engine == V.ENGINE_TORCHTITAN and r.seq_len >= 32768,
           lambda v: _catalog_fields(_HOPPER, sdpa_attention_efficiency=v)),
    Fitted("MEGATRON_RING_ATTENTION_SLOWDOWN", "cost_model/engines/kernels.py", kernels.MEGATRON_RING_ATTENTION_SLOWDOWN,
           (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6),
           lambda r: r.file == "published_runs_long_context.csv" and r.engine == V.ENGINE_MEGATRON
           and (pm._int(r.raw.get("cp")) or 1) > 1,
           _ring_slowdown),
    Fitted("HOST_OP_S", "cost_model/hardware/catalog.py", catalog.HOST_OP_S,
           (2.0e-5, 2.5e-5, 3.0e-5, 3.7e-5, 4.0e-5, 4.5e-5, 5.0e-5),
           # the two host-bound rows catalog.py names: Qwen3 MoE on DGX B200 at MBS 1
           lambda r: r.file == "published_runs_bridge.csv" and r.moe and r.gpu == "b200"
           and pm._int(r.raw.get("micro_batch")) == 1 and "qwen3" in r.id.lower(),
           lambda v: _catalog_fields(tuple(catalog.CATALOG), host_op_s=v)),
    Fitted("FRAGMENTATION_FRACTION", "cost_model/terms/transients.py", transients.FRAGMENTATION_FRACTION,
           tuple(round(0.01 * i, 2) for i in range(16)),
           lambda r: r.file == pm.DEFAULT_CSV.name and r.published_gib is not None,
           _fragmentation, metric="memory", procedure="cover"),
)


def _err(row: Row, pred: tuple[float, float] | None, metric: str) -> float | None:
    """Signed relative error (pred - published) / published, of time or memory."""
    if pred is None:
        return None
    ref, got = (row.published_s, pred[0]) if metric == "time" else (row.published_gib, pred[1])
    return None if ref is None else (got - ref) / ref


def refit(c: Fitted, table: dict[object, list[float | None]], idx: Sequence[int]):
    """The grid value the procedure picks on rows `idx` (table: value -> error per fit row)."""
    def usable(v):
        return all(table[v][i] is not None for i in idx)

    cands = [v for v in c.grid if usable(v)] or list(c.grid)
    if c.procedure == "cover":
        covering = [v for v in cands if all((table[v][i] or 0.0) >= 0.0 for i in idx)]
        return covering[0] if covering else cands[-1]
    return min(cands, key=lambda v: fmean(1.0 if table[v][i] is None else abs(table[v][i]) for i in idx))


@dataclass
class HeldOut:
    constant: Fitted
    unit: str  # "source" or "row" (one source only)
    n: int
    sources: int
    refit_all: object
    in_sample: list[float]  # signed errors at the code's value
    held_out: list[float]  # signed errors at the value refitted without the row's unit
    by_row: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # id -> (pred_s, pred_gib) held out
    per_unit: list[tuple[str, object, float]] = field(default_factory=list)  # unit, refit value, mean signed error


def evaluate(c: Fitted, rows: list[Row],
             predictor: Callable[[Row], tuple[float, float] | None] | None = None) -> HeldOut | None:
    """In-sample and held-out errors of constant `c` on its rows (`predictor`: a row's
    (seconds, GiB) with the constant as `c.apply` set it; the cost model by default)."""
    predictor = predictor or predict
    fit_rows = [r for r in rows if c.rows(r) and (r.published_s if c.metric == "time" else r.published_gib) is not None]
    if not fit_rows:
        return None
    preds: dict[object, list] = {}
    for v in c.grid if c.value in c.grid else (*c.grid, c.value):
        with c.apply(v):
            preds[v] = [predictor(r) for r in fit_rows]
    table = {v: [_err(r, p, c.metric) for r, p in zip(fit_rows, ps, strict=True)] for v, ps in preds.items()}
    sources = sorted({r.source for r in fit_rows})
    unit = "source" if len(sources) > 1 else "row"
    keys = [r.source if unit == "source" else r.id for r in fit_rows]
    out = HeldOut(c, unit, len(fit_rows), len(sources), refit(c, table, range(len(fit_rows))),
                  [e for e in table[c.value] if e is not None], [])
    for k in dict.fromkeys(keys):
        held = [i for i, kk in enumerate(keys) if kk == k]
        train = [i for i, kk in enumerate(keys) if kk != k]
        v = refit(c, table, train)
        errs = []
        for i in held:
            e = table[v][i]
            if e is not None:
                errs.append(e)
                out.by_row[fit_rows[i].id] = preds[v][i]
        out.held_out.extend(errs)
        out.per_unit.append((k, v, fmean(errs) if errs else math.nan))
    return out


# --------------------------------------------------------------------------- ranking


@dataclass
class RankGroup:
    key: tuple
    ids: list[str]
    pairs: int
    agree: int
    best_measured: str
    best_predicted: str
    measured: list[float] = field(default_factory=list)  # seconds per token, as ids
    predicted: list[float] = field(default_factory=list)

    @property
    def best_ok(self) -> bool:
        return self.best_measured == self.best_predicted


def pair_agreement(measured: Sequence[float], predicted: Sequence[float], min_gap: float = RANK_MIN_GAP) -> tuple[int, int]:
    """(pairs, pairs ordered as measured): over every pair whose measured values differ by
    more than `min_gap` (relative to the smaller), whether the predicted values order them the
    same way (a predicted tie counts as not ordered)."""
    pairs = agree = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            a, b = measured[i], measured[j]
            if abs(a - b) <= min_gap * min(a, b):
                continue
            pairs += 1
            agree += (a < b and predicted[i] < predicted[j]) or (a > b and predicted[i] > predicted[j])
    return pairs, agree


def ranking(rows: list[Row]) -> list[RankGroup]:
    """Head-to-head groups: one file, source, model, GPU type and count, sequence length and
    dtype; compared on seconds per token (the step time where the batch is the same)."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        if r.published_s is not None and r.predicted_s is not None:
            groups[(r.file, r.source, r.model, r.gpu, r.num_gpus, r.seq_len, r.dtype)].append(r)
    out = []
    for key, rs in groups.items():
        if len(rs) < 2:
            continue
        meas = [r.published_s / r.tokens_per_step for r in rs]
        pred = [r.predicted_s / r.tokens_per_step for r in rs]
        pairs, agree = pair_agreement(meas, pred)
        out.append(RankGroup(key, [r.id for r in rs], pairs, agree,
                             rs[meas.index(min(meas))].id, rs[pred.index(min(pred))].id, meas, pred))
    return out


# --------------------------------------------------------------------------- residuals


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default 'linear' method)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def held_out_ratios(rows: list[Row], results: list[HeldOut]) -> tuple[dict[str, float], dict[str, float]]:
    """Per row id: measured / predicted step time and peak memory, the prediction held out
    from every constant fitted to the row (the one that errs most where several were)."""
    time_r, mem_r = {}, {}
    for r in rows:
        if r.predicted_s is None:
            continue
        if r.published_s is not None:
            cands = [r.published_s / h.by_row[r.id][0] for h in results if h.constant.metric == "time" and r.id in h.by_row]
            time_r[r.id] = max(cands + [r.published_s / r.predicted_s], key=lambda x: abs(math.log(x)))
        if r.published_gib is not None and r.peak_gib:
            cands = [r.published_gib / h.by_row[r.id][1] for h in results if h.constant.metric == "memory" and r.id in h.by_row]
            mem_r[r.id] = max(cands + [r.published_gib / r.peak_gib])
    return time_r, mem_r



def _up(x: float) -> float:
    """x rounded up to 4 decimals: a stored bound never falls below the ratio it bounds (a
    memory upper bound rounded down missed a published peak by 0.003 GiB)."""
    return math.ceil(x * 1e4 - 1e-9) / 1e4


def _down(x: float) -> float:
    return math.floor(x * 1e4 + 1e-9) / 1e4

def residual_table(rows: list[Row], time_r: dict[str, float], mem_r: dict[str, float], files: list[str]) -> dict:
    """The residuals.toml document: per bucket, the p10 / p90 of measured / predicted time
    and the largest measured / predicted memory, with their row counts."""
    by_bucket: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: {"time": [], "memory": []})
    for r in rows:
        for key in intervals.fallbacks(r.bucket):  # the bucket and its pooled fallbacks
            if r.id in time_r:
                by_bucket[key]["time"].append(time_r[r.id])
            if r.id in mem_r:
                by_bucket[key]["memory"].append(mem_r[r.id])
    all_t = list(time_r.values())
    buckets = {}
    for key, b in sorted(by_bucket.items()):
        entry: dict = {"time_rows": len(b["time"]), "memory_rows": len(b["memory"])}
        if b["time"]:
            entry["time_ratio_p10"] = _down(quantile(b["time"], 0.10))
            entry["time_ratio_p90"] = _up(quantile(b["time"], 0.90))
        if b["memory"]:
            entry["memory_ratio_max"] = _up(max(b["memory"]))
        buckets[".".join(key)] = entry
    return {
        "provenance": {
            "generated": datetime.date.today().isoformat(),
            "by": "python validation/heldout.py --write",
            "files": files,
            "time_rows": len(time_r),
            "memory_rows": len(mem_r),
            "ratio": "measured / held-out prediction",
        },
        "default": {
            # pooled over every bucket, for buckets with fewer rows than min_*_rows
            "min_time_rows": intervals.DEFAULT_MIN_TIME_ROWS,
            "min_memory_rows": intervals.DEFAULT_MIN_MEMORY_ROWS,
            "time_ratio_p10": _down(min(quantile(all_t, 0.10), 1.0)) if all_t else 0.8,
            "time_ratio_p90": _up(max(quantile(all_t, 0.90), 1.0)) if all_t else 1.25,
            # no published peak of the bucket: the largest ratio of every measured peak (the
            # only evidence there is of the memory model's error), at least 1
            "memory_ratio_max": _up(max([1.0, *mem_r.values()])),
        },
        "buckets": buckets,
    }


def write_toml(doc: dict, path: Path) -> None:
    def val(v):
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    lines = ["# Residual quantiles of the held-out predictions: written by `python validation/heldout.py --write`;",
             "# read by cost_model/hardware/intervals.py. Do not edit by hand.", ""]
    for section in ("provenance", "default"):
        lines.append(f"[{section}]")
        lines += [f"{k} = {val(v)}" for k, v in doc[section].items()]
        lines.append("")
    for name, entry in doc["buckets"].items():
        lines.append(f'[buckets."{name}"]')
        lines += [f"{k} = {val(v)}" for k, v in entry.items()]
        lines.append("")
    path.write_text("\n".join(lines))


# --------------------------------------------------------------------------- report


def _mape(errs: Sequence[float]) -> float:
    return 100.0 * fmean(abs(e) for e in errs) if errs else math.nan


def _bias(errs: Sequence[float]) -> float:
    return 100.0 * fmean(errs) if errs else math.nan


def load_rows(files: list[Path]) -> list[Row]:
    rows = _nar_rows(nar.DEFAULT_CSV)
    for f in files:
        rows += _modern_rows(f)
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"row ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    for r in rows:
        p = predict(r)
        if p is None:
            r.error = "no valid configuration"
        else:
            r.predicted_s, r.peak_gib = p
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", help="comma-separated modern-format CSVs (default: the shared one and validation/*.csv)")
    ap.add_argument("--quick", action="store_true", help="leave out published_runs_bridge_archive.csv")
    ap.add_argument("--write", action="store_true", help="write cost_model/hardware/residuals.toml")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    files = [Path(f) for f in args.files.split(",")] if args.files else [
        f for f in MODERN_FILES if not (args.quick and f.name == "published_runs_bridge_archive.csv")]
    rows = load_rows(files)
    results = [h for c in FITTED if (h := evaluate(c, rows)) is not None]
    groups = ranking(rows)
    time_r, mem_r = held_out_ratios(rows, results)
    doc = residual_table(rows, time_r, mem_r, [nar.DEFAULT_CSV.name] + [f.name for f in files])

    print("Held-out error of each fitted constant (signed errors: predicted vs published)")
    print(f"{'constant':34s} {'metric':6s} {'rows':>4s} {'src':>3s} {'unit':6s} {'value':>12s} {'refit':>12s} "
          f"{'in-MAPE%':>8s} {'in-bias%':>8s} {'HO-MAPE%':>8s} {'HO-bias%':>8s}")
    for h in results:
        print(f"{h.constant.name[:34]:34s} {h.constant.metric:6s} {h.n:4d} {h.sources:3d} {h.unit:6s} "
              f"{h.constant.value!s:>12.12s} {h.refit_all!s:>12.12s} {_mape(h.in_sample):8.1f} {_bias(h.in_sample):+8.1f} "
              f"{_mape(h.held_out):8.1f} {_bias(h.held_out):+8.1f}")
        for k, v, e in h.per_unit:
            print(f"    held out {k[:70]:70s} refit {v!s:>12.12s}  mean {100 * e:+.1f}%")

    print("\nPer source group: rows, in-sample MAPE (the code's constants), held-out MAPE (every row fitted to "
          "predicted with its constants refitted without it), signed held-out bias")
    print(f"{'file / source':80s} {'rows':>4s} {'in-MAPE%':>8s} {'HO-MAPE%':>8s} {'HO-bias%':>8s}")
    by_src: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        if r.id in time_r:
            by_src[(r.file, r.source)].append(r)
    for (f, s), rs in sorted(by_src.items()):
        ins = [r.predicted_s / r.published_s - 1 for r in rs]
        ho = [1 / time_r[r.id] - 1 for r in rs]
        print(f"{(f + ' / ' + s)[:80]:80s} {len(rs):4d} {_mape(ins):8.1f} {_mape(ho):8.1f} {_bias(ho):+8.1f}")
    all_in = [r.predicted_s / r.published_s - 1 for r in rows if r.id in time_r]
    all_ho = [1 / time_r[r.id] - 1 for r in rows if r.id in time_r]
    print(f"{'all':80s} {len(all_in):4d} {_mape(all_in):8.1f} {_mape(all_ho):8.1f} {_bias(all_ho):+8.1f}")

    pairs = sum(g.pairs for g in groups)
    agree = sum(g.agree for g in groups)
    ranked = [g for g in groups if g.pairs]  # groups whose best is measured > 5% ahead of another
    best = sum(g.best_ok for g in ranked)
    print(f"\nRanking: {len(groups)} head-to-head groups (one file, source, model, GPU type and count, sequence, "
          f"dtype), {pairs} pairs measured > {100 * RANK_MIN_GAP:.0f}% apart, {agree} ordered as measured "
          f"({100 * agree / max(pairs, 1):.0f}%); in the {len(ranked)} groups with such a pair the measured best is "
          f"the predicted best in {best}")
    for g in ranked:
        rows = "; ".join(f"{i} meas {m / g.measured[0]:.2f} pred {p / g.predicted[0]:.2f}"
                         for i, m, p in zip(g.ids, g.measured, g.predicted, strict=True))
        print(f"  {g.key[0][:24]:24s} {g.key[2][:16]:16s} {g.key[3]:9s} x{g.key[4]:<5d} pairs {g.agree}/{g.pairs} "
              f"best {'ok' if g.best_ok else 'MISSED'}: {rows}")

    print("\nHeld-out residual quantiles (measured / predicted) per bucket: engine.family.regime.scale")
    for name, e in doc["buckets"].items():
        print(f"  {name:45s} time n={e['time_rows']:3d} p10 {e.get('time_ratio_p10', '-')!s:>6s} "
              f"p90 {e.get('time_ratio_p90', '-')!s:>6s}   memory n={e['memory_rows']} max {e.get('memory_ratio_max', '-')}")
    d = doc["default"]
    print(f"  default (< {d['min_time_rows']} time / < {d['min_memory_rows']} memory rows): time p10 {d['time_ratio_p10']} "
          f"p90 {d['time_ratio_p90']}, memory max {d['memory_ratio_max']}")
    if args.write:
        write_toml(doc, intervals.RESIDUALS_PATH)
        print(f"wrote {intervals.RESIDUALS_PATH}")
    if args.json:
        print(json.dumps({
            "constants": [{"name": h.constant.name, "unit": h.unit, "rows": h.n, "in_mape_pct": _mape(h.in_sample),
                           "held_out_mape_pct": _mape(h.held_out), "held_out_bias_pct": _bias(h.held_out)}
                          for h in results],
            "ranking": {"groups": len(groups), "pairs": pairs, "agree": agree, "ranked_groups": len(ranked),
                        "best": best},
            "residuals": doc,
        }, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
