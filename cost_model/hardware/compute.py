"""Compute time of GEMMs and memory-bound kernels on one device.

GEMM: t = 2MNK / (peak * eta(M, N, K)) + overhead, with a saturating shape model
    eta = eta_max * prod_d d / (d + d_half),   d in (M, N, K)
— the smooth form of the tile/wave-quantisation and fixed-cost losses that make small GEMMs
slow (NVIDIA "Matrix Multiplication Background" user guide; the roofline of Williams et al.
2009 caps it: t >= bytes / HBM bandwidth). eta_max and d_half are per-GPU catalog entries.
FP8 GEMMs reach a lower fraction of their (2x) peak than bf16 GEMMs of theirs
(`fp8_gemm_ratio`; NVIDIA's published cuBLASLt H100 numbers: ~1300-1450 of 1979 dense fp8
TFLOP/s against ~700-760 of 989 bf16 at large shapes, a ratio of ~0.9).
Memory-bound kernels (norms, activations, dropout, residual adds, softmax, optimizer):
t = bytes / (HBM bandwidth * achieved fraction) + overhead per kernel (roofline, Williams
et al. 2009).
Fused attention (flash_attention_time_s): eta = eta_max * s_kv/(s_kv + s_half) * d/(d + d_half),
the saturating form of the measured FlashAttention throughput against sequence length and
head dim (Dao 2023, FlashAttention-2 fig. 5-6: A100 causal hdim 128 forward ~90 TFLOP/s at
512 keys rising to ~190 at 16K, hdim 64 ~20% below; Shah et al. 2024, FlashAttention-3
fig. 7: H100 bf16 forward ~330 TFLOP/s at 512 to ~640-660 at 16K, backward ~0.8x the
forward). eta_max is the kernel's long-sequence fraction of peak: `attention_efficiency`
for the cuDNN / FA3-class kernel Transformer Engine runs, `sdpa_attention_efficiency` for
PyTorch SDPA's FlashAttention-2 backend (cost_model/engines/kernels.py says which engine runs which).
"""

from __future__ import annotations

from cost_model.specs.inputs import GPUSpec
from cost_model.specs.vocab import (
    ATTN_SDPA,
    DTYPE_BF16,
    DTYPE_BYTES,
    DTYPE_FP8,
    DTYPE_FP32,
    DTYPE_TF32,
)


def peak_flops(gpu: GPUSpec, dtype: str) -> float:
    """Dense peak FLOP/s for the matmul dtype (fp32 training uses TF32 tensor cores, as
    PyTorch's default `allow_tf32` for cuDNN and Megatron do; say so)."""
    key = DTYPE_TF32 if dtype == DTYPE_FP32 and not gpu.host else dtype
    return gpu.peak_tflops[key] * 1e12


def mfu_peak_flops(gpu: GPUSpec) -> float:
    """The peak MFU and HFU divide by, whatever the training dtype: the dense bf16 peak (PaLM,
    Chowdhery et al. 2022, App. B: MFU = achieved model FLOP/s over the hardware's peak, bf16
    on TPU v4; Megatron and torchtitan report it against bf16 too), so an fp8 run is compared
    with a bf16 run on the same footing instead of against a 2x larger fp8 peak. A host device
    whose bf16 is no faster than fp32 (the CPU): its fp32 peak, the highest it has."""
    return max(peak_flops(gpu, DTYPE_BF16), peak_flops(gpu, DTYPE_FP32))


def gemm_efficiency(gpu: GPUSpec, m: float, n: float, k: float) -> float:
    """eta(M, N, K) of the module docstring."""
    eta = gpu.gemm_max_efficiency
    for d in (m, n, k):
        eta *= d / (d + gpu.gemm_half_dim)
    return eta


def gemm_time_s(gpu: GPUSpec, dtype: str, m: float, n: float, k: float, batch: float = 1.0) -> float:
    """Time of `batch` GEMMs of (M x K) @ (K x N), bounded below by reading A, B and writing C."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    flops = 2.0 * m * n * k * batch
    eta = gemm_efficiency(gpu, m, n, k) * (gpu.fp8_gemm_ratio if dtype == DTYPE_FP8 else 1.0)
    compute = flops / (peak_flops(gpu, dtype) * eta)
    nbytes = DTYPE_BYTES[dtype] * batch * (m * k + k * n + m * n)
    memory = nbytes / (gpu.hbm_gb_s * 1e9 * gpu.memory_bound_efficiency)
    return max(compute, memory) + gpu.kernel_overhead_s


def memory_bound_time_s(gpu: GPUSpec, nbytes: float, kernels: int = 1) -> float:
    """Elementwise / reduction kernels moving `nbytes` through HBM."""
    if nbytes <= 0:
        return 0.0
    return nbytes / (gpu.hbm_gb_s * 1e9 * gpu.memory_bound_efficiency) + kernels * gpu.kernel_overhead_s


def attention_efficiency(gpu: GPUSpec, kernel: str, keys: float, head_dim: float, backward: bool = False) -> float:
    """eta of the module docstring for one kernel call over `keys` keys per query block."""
    eta = gpu.sdpa_attention_efficiency if kernel == ATTN_SDPA else gpu.attention_efficiency
    eta *= keys / (keys + gpu.attention_half_seq) * head_dim / (head_dim + gpu.attention_half_head_dim)
    return eta * (gpu.attention_bwd_ratio if backward else 1.0)


def flash_attention_time_s(gpu: GPUSpec, dtype: str, flops: float, keys: float = 1e9, head_dim: float = 128.0,
                           kernel: str = "fused", backward: bool = False, calls: int = 1) -> float:
    """Fused attention of `flops` over `calls` kernel launches of `keys` keys each."""
    if flops <= 0:
        return 0.0
    eta = attention_efficiency(gpu, kernel, keys, head_dim, backward)
    return flops / (peak_flops(gpu, dtype) * eta) + calls * gpu.kernel_overhead_s
