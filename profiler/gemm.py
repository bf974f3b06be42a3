"""Achieved GEMM throughput over square shapes: the curve behind the catalog's
`gemm_max_efficiency` / `gemm_half_dim` (cost_model.hardware.compute.gemm_efficiency)."""

from __future__ import annotations

import statistics
import time

import torch

from profiler.layers import _Timer

GPU_DIMS = (256, 512, 1024, 2048, 4096, 8192)
CPU_DIMS = (64, 128, 256, 512, 1024)


def gemm_tflops(dim: int, device: torch.device, dtype: torch.dtype, warmup: int = 2, repeats: int = 5,
                budget_s: float = 5.0, cpu_clock: bool = False) -> float:
    """Median TFLOP/s of one (dim x dim) @ (dim x dim) matmul."""
    a = torch.randn(dim, dim, device=device, dtype=dtype)
    b = torch.randn(dim, dim, device=device, dtype=dtype)
    timer = _Timer(device, cpu_clock)
    times = []
    t0 = time.perf_counter()
    for i in range(warmup + repeats):
        dt, _ = timer(lambda: a @ b)
        if i >= warmup:
            times.append(dt)
            if time.perf_counter() - t0 > budget_s:
                break
    return 2.0 * dim**3 / statistics.median(times) / 1e12
