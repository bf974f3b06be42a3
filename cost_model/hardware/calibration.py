"""Fit the analytic model's efficiency constants of one device from a profile.

A profile's exact layer rows replace layer times only at the shapes it measured
(cost_model.terms.compute.profiled_times); this module makes the rest of the profile calibrate the
device itself, so an estimate at a micro-batch, TP degree or sequence the profile did not
measure still uses it. From the profile's micro-benchmarks it fits, by least squares on
relative (log) residuals of the engine's own time functions (cost_model.hardware.compute):

* memory-bound kernels (`memory_bound` rows: bytes, kernels, seconds) ->
  `kernel_overhead_s` and the achieved bandwidth, i.e. `memory_bound_efficiency`
  (roofline, Williams et al. 2009: t = bytes / (bandwidth * fraction) + overhead/kernel);
* the square-GEMM sweep (`gemm_tflops`) -> the shape curve of compute.gemm_efficiency,
  `gemm_max_efficiency` and `gemm_half_dim`, with the overhead fitted above;
* fused attention (`attention` rows: causal core FLOPs, seconds) -> `attention_efficiency`.

Collective alpha-beta fits are the profile's own (profiler/comm.py) and are used as they are.

Bounds keep the constants physical: efficiencies in (0, 1]. An achieved ceiling above the
catalog's peak FLOP/s or bandwidth (an assumed number, as for the "cpu" device) moves that
number up to what was measured, with efficiency 1, and `efficiency_source` says so.

The fit is a pure function of (catalog GPUSpec, profile, dtype); `calibrated_gpu` caches it
per profile object because layer_table runs for every candidate of a search.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

from cost_model.hardware import compute
from cost_model.specs.inputs import CalibrationProfile, GPUSpec

# Search ranges of the fit, as factors of the catalog value (the catalog may be an
# assumption off by orders of magnitude, as for a CPU) or absolute where no catalog value
# scales them. They bound a search, they are not device numbers.
CEILING_RANGE = (1e-3, 1e2)  # achieved GEMM FLOP/s ceiling / catalog peak
BANDWIDTH_RANGE = (1e-3, 1e2)  # achieved memory-bound bandwidth / catalog bandwidth
HALF_DIM_RANGE = (1.0, 1e5)  # gemm_half_dim, elements
OVERHEAD_RANGE_S = (1e-8, 1e-2)  # per-kernel launch/tail cost
EFFICIENCY_RANGE = (1e-3, 1.0)  # attention_efficiency: a fraction of peak

_GRID_STEPS = 21
_GRID_ROUNDS = 6


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The calibrated device and what was fitted (constant -> value, and the rms relative
    error of each micro-benchmark's fit)."""

    gpu: GPUSpec
    fitted: dict[str, float]
    rms_rel_error: dict[str, float]


def _grid_fit(loss: Callable[[tuple[float, ...]], float], bounds: Sequence[tuple[float, float]]) -> tuple[float, ...]:
    """Minimise `loss` over a box by a log-spaced grid refined around its best point
    (each round narrows the box to +-2 cells): bounded, derivative-free, deterministic,
    and enough for 1-2 smooth parameters."""
    lo = [math.log(b[0]) for b in bounds]
    hi = [math.log(b[1]) for b in bounds]
    full = list(zip(lo, hi, strict=True))
    best, best_val = None, math.inf
    for _ in range(_GRID_ROUNDS):
        axes = [[a + (b - a) * i / (_GRID_STEPS - 1) for i in range(_GRID_STEPS)] for a, b in zip(lo, hi, strict=True)]
        for point in itertools.product(*axes):
            val = loss(tuple(math.exp(x) for x in point))
            if val < best_val:
                best, best_val = point, val
        cell = [(b - a) / (_GRID_STEPS - 1) for a, b in zip(lo, hi, strict=True)]
        lo = [max(f[0], x - 2 * c) for x, c, f in zip(best, cell, full, strict=True)]
        hi = [min(f[1], x + 2 * c) for x, c, f in zip(best, cell, full, strict=True)]
    return tuple(math.exp(x) for x in best)


def _rms_log(pairs: Sequence[tuple[float, float]]) -> float:
    """Root mean square of log(model / measured): relative, so small and large shapes weigh alike."""
    return math.sqrt(sum(math.log(m / t) ** 2 for m, t in pairs) / len(pairs))


def _with_ceiling(gpu: GPUSpec, ceiling_flops: float, dtype: str, **kw) -> GPUSpec:
    """`gpu` whose achieved GEMM ceiling is `ceiling_flops`: gemm_max_efficiency = ceiling /
    peak, or, above the peak, every dtype's peak scaled up to it and efficiency 1."""
    peak = compute.peak_flops(gpu, dtype)
    if ceiling_flops <= peak:
        return dataclasses.replace(gpu, gemm_max_efficiency=ceiling_flops / peak, **kw)
    scale = ceiling_flops / peak
    return dataclasses.replace(gpu, peak_tflops={k: v * scale for k, v in gpu.peak_tflops.items()},
                               gemm_max_efficiency=1.0, **kw)


def _with_bandwidth(gpu: GPUSpec, bw_bytes_s: float, overhead_s: float) -> GPUSpec:
    """`gpu` achieving `bw_bytes_s` on memory-bound kernels (above the catalog bandwidth:
    the bandwidth moves up, efficiency 1)."""
    hbm_bytes_s = gpu.hbm_gb_s * 1e9
    if bw_bytes_s <= hbm_bytes_s:
        return dataclasses.replace(gpu, memory_bound_efficiency=bw_bytes_s / hbm_bytes_s, kernel_overhead_s=overhead_s)
    return dataclasses.replace(gpu, hbm_gb_s=bw_bytes_s / 1e9, memory_bound_efficiency=1.0, kernel_overhead_s=overhead_s)


def _fit_memory_bound(gpu: GPUSpec, profile: CalibrationProfile, fitted: dict, rms: dict) -> GPUSpec:
    """t = kernels * overhead + bytes / bandwidth is linear in (overhead, 1 / bandwidth):
    ordinary least squares on seconds, closed form, then the bounds (a clipped unknown is
    held and the other refitted). Seconds, not relative errors: on a host with caches the
    small kernels run faster per byte than the large ones, and the large ones (optimizer
    step, gradient copies, which no layer row covers) are what a step pays most for."""
    rows = [r for r in profile.memory_bound if r.work > 0 and r.time_s > 0]
    if not rows:
        return gpu
    bw0 = gpu.hbm_gb_s * 1e9 * gpu.memory_bound_efficiency
    inv_lo, inv_hi = 1 / (bw0 * BANDWIDTH_RANGE[1]), 1 / (bw0 * BANDWIDTH_RANGE[0])
    ks = [float(r.kernels) for r in rows]
    bs = [r.work for r in rows]
    ts = [r.time_s for r in rows]
    skk, sbb, skb = sum(k * k for k in ks), sum(b * b for b in bs), sum(k * b for k, b in zip(ks, bs, strict=True))
    sk = sum(k * t for k, t in zip(ks, ts, strict=True))
    sb = sum(b * t for b, t in zip(bs, ts, strict=True))
    det = skk * sbb - skb * skb
    if len({r.work for r in rows}) >= 2 and det > 1e-12 * skk * sbb:
        overhead, inv_bw = (sk * sbb - sb * skb) / det, (skk * sb - skb * sk) / det
    else:  # one size: the overhead is not separable, keep the catalog's
        overhead = gpu.kernel_overhead_s
        inv_bw = min(max((sb - overhead * skb) / sbb, inv_lo), inv_hi)
    if not OVERHEAD_RANGE_S[0] <= overhead <= OVERHEAD_RANGE_S[1] or not inv_lo <= inv_bw <= inv_hi:
        overhead = min(max(overhead, OVERHEAD_RANGE_S[0]), OVERHEAD_RANGE_S[1])
        inv_bw = min(max((sb - overhead * skb) / sbb, inv_lo), inv_hi)
        overhead = min(max((sk - inv_bw * skb) / skk, OVERHEAD_RANGE_S[0]), OVERHEAD_RANGE_S[1])
    out = _with_bandwidth(gpu, 1 / inv_bw, overhead)
    fitted.update(memory_bound_efficiency=out.memory_bound_efficiency, hbm_gb_s=out.hbm_gb_s,
                  kernel_overhead_s=out.kernel_overhead_s)
    rms["memory_bound"] = _rms_log([(compute.memory_bound_time_s(out, r.work, r.kernels), r.time_s) for r in rows])
    return out


def _fit_gemm(gpu: GPUSpec, profile: CalibrationProfile, dtype: str, fitted: dict, rms: dict) -> GPUSpec:
    """For a given half-dimension the compute-bound time t - overhead = 2d^3 / (C * curve)
    is linear in 1 / C (closed-form weighted least squares, weights 1 / t); the half
    dimension is searched on a log grid (_grid_fit) with the engine's full gemm_time_s
    (roofline and overhead included) as the loss, then both are refined together."""
    rows = [(d, tf) for d, tf in sorted(profile.gemm_tflops.items()) if tf > 0]
    if not rows:
        return gpu
    measured = [(d, 2.0 * d**3 / (tf * 1e12)) for d, tf in rows]
    peak = compute.peak_flops(gpu, dtype)
    c_lo, c_hi = peak * CEILING_RANGE[0], peak * CEILING_RANGE[1]

    def model(p: tuple[float, ...]) -> list[tuple[float, float]]:
        g = _with_ceiling(gpu, p[0], dtype, gemm_half_dim=p[1])
        return [(compute.gemm_time_s(g, dtype, d, d, d), t) for d, t in measured]

    def ceiling(half_dim: float) -> float:
        a = [2.0 * d**3 / (d / (d + half_dim)) ** 3 / t for d, t in measured]  # per row, / t
        y = [(t - gpu.kernel_overhead_s) / t for _, t in measured]
        x = sum(ai * yi for ai, yi in zip(a, y, strict=True)) / sum(ai * ai for ai in a)
        return min(max(1 / x, c_lo), c_hi) if x > 0 else c_hi

    if len(rows) >= 2:
        (h,) = _grid_fit(lambda p: _rms_log(model((ceiling(p[0]), p[0]))), [HALF_DIM_RANGE])
        c = ceiling(h)
        local = [(max(c_lo, c / 2), min(c_hi, c * 2)), (max(HALF_DIM_RANGE[0], h / 2), min(HALF_DIM_RANGE[1], h * 2))]
        best = _grid_fit(lambda p: _rms_log(model(p)), local)
    else:  # one point: the curve's knee is not identifiable, keep the catalog's
        best = (*_grid_fit(lambda p: _rms_log(model((p[0], gpu.gemm_half_dim))), [(c_lo, c_hi)]), gpu.gemm_half_dim)
    out = _with_ceiling(gpu, best[0], dtype, gemm_half_dim=best[1])
    fitted.update(gemm_max_efficiency=out.gemm_max_efficiency, gemm_half_dim=out.gemm_half_dim,
                  peak_tflops=compute.peak_flops(out, dtype) / 1e12)
    rms["gemm"] = _rms_log(model(best))
    return out


def _fit_attention(gpu: GPUSpec, profile: CalibrationProfile, dtype: str, fitted: dict, rms: dict) -> GPUSpec:
    rows = [r for r in profile.attention if r.work > 0 and r.time_s > 0]
    if not rows:
        return gpu

    def model(p: tuple[float, ...]) -> list[tuple[float, float]]:
        g = dataclasses.replace(gpu, attention_efficiency=p[0])
        return [(compute.flash_attention_time_s(g, dtype, r.work), r.time_s) for r in rows]

    best = _grid_fit(lambda p: _rms_log(model(p)), [EFFICIENCY_RANGE])
    fitted["attention_efficiency"] = best[0]
    rms["attention"] = _rms_log(model(best))
    return dataclasses.replace(gpu, attention_efficiency=best[0])


def fit_device(gpu: GPUSpec, profile: CalibrationProfile, dtype: str) -> Calibration | None:
    """The catalog `gpu` with the efficiency constants `profile` measures (module docstring),
    or None when the profile describes another device or carries no micro-benchmarks.
    Order: memory-bound first (it fixes the per-kernel overhead the GEMM and attention
    times include), then GEMMs (they may move the peak attention is a fraction of)."""
    if profile.device != gpu.name:
        return None
    dtype = profile.dtype or dtype
    fitted: dict[str, float] = {}
    rms: dict[str, float] = {}
    out = _fit_memory_bound(gpu, profile, fitted, rms)
    out = _fit_gemm(out, profile, dtype, fitted, rms)
    out = _fit_attention(out, profile, dtype, fitted, rms)
    if not fitted:
        return None
    moved = [k for k in ("peak_tflops", "hbm_gb_s") if k in fitted and fitted[k] != _catalog_value(gpu, k, dtype)]
    note = f"; measured above the catalog's {', '.join(moved)}, which moved up" if moved else ""
    errors = ", ".join(f"{k} rms {v * 100:.1f}%" for k, v in rms.items())
    out = dataclasses.replace(out, efficiency_source=f"fitted from profile ({errors}){note}: {profile.source}")
    return Calibration(out, fitted, rms)


def _catalog_value(gpu: GPUSpec, key: str, dtype: str) -> float:
    return compute.peak_flops(gpu, dtype) / 1e12 if key == "peak_tflops" else gpu.hbm_gb_s


_CACHE: dict[tuple[int, int, str], tuple[CalibrationProfile, GPUSpec, Calibration | None]] = {}
_CACHE_SIZE = 16


def calibrated_gpu(gpu: GPUSpec, profile: CalibrationProfile, dtype: str) -> GPUSpec | None:
    """fit_device's GPUSpec, cached per (profile, gpu) object (both are frozen); None when
    the profile does not calibrate `gpu`."""
    key = (id(profile), id(gpu), dtype)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not profile or hit[1] is not gpu:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        hit = (profile, gpu, fit_device(gpu, profile, dtype))
        _CACHE[key] = hit
    return hit[2].gpu if hit[2] is not None else None
