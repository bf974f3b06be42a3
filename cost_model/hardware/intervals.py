"""Prediction intervals: how far published runs fell from the cost model's held-out
predictions, per engine x GPU family x regime, as the factors that give every estimate a
p10-p90 step time and an upper bound on its peak memory.

The data is residuals.toml beside this module, written by `python validation/heldout.py
--write` (its [provenance] says when, from which files and how many rows). A residual is the
ratio measured / predicted of one published row, the prediction held out from every constant
that was fitted to that row (leave-one-source-out; validation/heldout.py).

Buckets: `engine.family.regime.scale`, with
- family: the catalog's efficiency family (catalog.FAMILY; a GPU object takes its base's),
- regime: `dense` or `moe` (the model has expert layers),
- scale: `single` (every GPU on one NVLink domain: a node, or an NVL72 rack) or `scale-out`.
A bucket with fewer rows than the table's min_time_rows / min_memory_rows falls back to the
same engine, family and regime at any scale, then to the engine and regime on any family,
then to the [default]: time, the p10 / p90 pooled over every row; memory, the largest ratio
over every measured peak (today torchtitan's on Hopper only: the other engines' memory is
priced by the same rule but no published peak checks it, and the bound assumes it errs as
the checked engine does). Without the file: DEFAULT_* below, wider, stated.

Step time: p10 = point x min(1, ratio p10), p90 = point x max(1, ratio p90) (so the point lies
inside its band). Memory: upper = peak x max(1, the largest ratio): no published peak of the
bucket lies above it. "Fits" compares the upper bound with the capacity, and the planner's
search lets a point estimate use capacity x min(1 - headroom, 1 / memory_upper)
(cost_model/pipeline/rank_costs.capacity_bytes), so every plan it keeps fits by the bound.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cost_model.hardware.catalog import CATALOG, FAMILY

RESIDUALS_PATH = Path(__file__).with_name("residuals.toml")
ANY = "any"
DENSE, MOE = "dense", "moe"
SINGLE, SCALE_OUT = "single", "scale-out"
# fallbacks the held-out script writes into [default] (the table's values are what is read)
DEFAULT_MIN_TIME_ROWS = 8
DEFAULT_MIN_MEMORY_ROWS = 3
# without residuals.toml: assumed, not measured (the checked rows' predictions fall in [0, +15%]
# above their measured peaks, none under)
DEFAULT_MEMORY_RATIO_MAX = 1.10


def family_of(gpu_name: str) -> str:
    """catalog.FAMILY of a catalog name, or of the longest catalog name it starts with (a GPU
    object named after its base, e.g. h100-sxm-96gb-500w); "other" otherwise."""
    name = gpu_name.strip().lower()
    if name in FAMILY:
        return FAMILY[name]
    bases = [k for k in CATALOG if name.startswith(k)]
    return FAMILY.get(max(bases, key=len), "other") if bases else "other"


def bucket_of(engine: str, gpu_name: str, moe: bool, scale_out: bool) -> tuple[str, str, str, str]:
    return engine, family_of(gpu_name), MOE if moe else DENSE, SCALE_OUT if scale_out else SINGLE


def fallbacks(key: tuple[str, str, str, str]) -> tuple[tuple[str, str, str, str], ...]:
    """The bucket, then the same at any scale, then any family: the order a lookup tries."""
    e, f, m, _ = key
    return key, (e, f, m, ANY), (e, ANY, m, ANY)


@dataclass(frozen=True)
class Band:
    """Factors on a point prediction, and where they come from."""

    time_low: float  # <= 1
    time_high: float  # >= 1
    memory_upper: float  # >= 1
    bucket: str
    time_from: str  # the bucket whose rows gave the time factors, or "default"
    time_rows: int
    memory_from: str
    memory_rows: int

    @property
    def source(self) -> str:
        return (f"held-out residuals of {self.bucket}: step time from {self.time_from} ({self.time_rows} rows), "
                f"memory from {self.memory_from} ({self.memory_rows} rows); {RESIDUALS_PATH.name}")


@cache
def table() -> dict:
    """residuals.toml, parsed; an absent file gives only the stated defaults."""
    if not RESIDUALS_PATH.is_file():
        return {"default": {"min_time_rows": DEFAULT_MIN_TIME_ROWS, "min_memory_rows": DEFAULT_MIN_MEMORY_ROWS,
                            "time_ratio_p10": 0.8, "time_ratio_p90": 1.25,
                            "memory_ratio_max": DEFAULT_MEMORY_RATIO_MAX}, "buckets": {}}
    return tomllib.loads(RESIDUALS_PATH.read_text())


@cache
def band(engine: str, gpu_name: str, moe: bool, scale_out: bool) -> Band:
    doc = table()
    d, buckets = doc["default"], doc.get("buckets", {})
    key = bucket_of(engine, gpu_name, moe, scale_out)
    t_from, m_from = "default", "default"
    t = (d["time_ratio_p10"], d["time_ratio_p90"], 0)
    m = (d["memory_ratio_max"], 0)
    for k in reversed(fallbacks(key)):  # the most specific bucket with enough rows wins
        b = buckets.get(".".join(k), {})
        if b.get("time_rows", 0) >= d["min_time_rows"]:
            t, t_from = (b["time_ratio_p10"], b["time_ratio_p90"], b["time_rows"]), ".".join(k)
        if b.get("memory_rows", 0) >= d["min_memory_rows"]:
            m, m_from = (b["memory_ratio_max"], b["memory_rows"]), ".".join(k)
    return Band(min(1.0, t[0]), max(1.0, t[1]), max(1.0, m[0]), ".".join(key), t_from, t[2], m_from, m[1])


def band_of(engine: str, gpu_name: str, moe: bool, num_gpus: int, nvlink_domain: int) -> Band:
    """The band of a run: `scale-out` where it spans more than one NVLink domain."""
    return band(engine, gpu_name, moe, num_gpus > nvlink_domain)
