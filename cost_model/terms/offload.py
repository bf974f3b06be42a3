"""Optimizer-state offload: what moves to the host, what the step then costs, and the host
memory it takes.

With the offload (ParallelConfig.optimizer_offload; engines/offload.py says which engines run
it) the GPU keeps its 16-bit weights and its gradient buffer; the optimizer states (fp32
master copy and Adam moments: the engine's `optimizer` bytes of engines/states.py) and a
pinned fp32 copy of the owned gradient shard live in host memory, and the optimizer step
runs on the CPU (ZeRO-Offload, Ren et al. 2021, USENIX ATC, §4.1 and Fig. 5: gradients to
the host, CPU-Adam, parameters back; Megatron-Core's HybridDeviceOptimizer does the same per
parameter).

Per step and owned parameter (the rank's ZeRO shard):
- device to host: its gradient (Megatron: the fp32 main gradient; DeepSpeed: the 16-bit one)
  over the GPU's host link;
- the CPU step: Adam reads and writes the master copy and both moments and reads the
  gradient, and the two copies read/write host DRAM too: 2K + 3 x 4 bytes of DRAM traffic
  (K = the optimizer bytes per parameter, 12 for Adam), at the node's DRAM bandwidth times
  host_memory_efficiency, shared by the node's GPUs whose CPU steps run at once;
- host to device: the updated parameter (Megatron copies the fp32 host copy into the GPU
  parameter, hybrid_optimizer.py param_copy_back_gpu_hook: 4 bytes; DeepSpeed the 16-bit
  parameter, ZeRO-Offload §4.1: 2 bytes).
The three stream under one another (HybridDeviceOptimizer with overlap_cpu_optimizer_d2h_h2d:
one CPU optimizer and stream pair per parameter; ZeRO-Offload §4.1 overlaps the gradient
copies with the backward and the parameter copies with the step), so the step takes the
longest of the three; it is not hidden under the next forward (no one-step delayed update,
which changes the training: ZeRO-Offload §4.2 DPU), so it is exposed at the step's end.
"""

from __future__ import annotations

import math

from cost_model.engines.states import grad_dtype_bytes, state_bytes_per_param
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec
from cost_model.specs.vocab import DTYPE_BF16, DTYPE_BYTES, DTYPE_FP8, DTYPE_FP32, ENGINE_DEEPSPEED

FP32_BYTES = DTYPE_BYTES[DTYPE_FP32]


def owned_params(cfg: ParallelConfig, params: float, shard: int) -> float:
    """Parameters whose optimizer step this rank runs: its ZeRO shard (the offload needs zero >= 1)."""
    return params / (max(1, shard) if cfg.zero >= 1 else 1)


def host_bytes(t: TrainingSpec, cfg: ParallelConfig, params: float, group: int, fp8_weight: float = 0.0) -> float:
    """Host memory the rank's offloaded states of `params` (replicated over a data-parallel
    group of `group` ranks) take: the engine's optimizer bytes (master + moments, sharded as
    the engine shards them: over the group, or its shard group under hybrid sharding) and the
    pinned fp32 gradient copy of the owned shard. 0 without the offload."""
    if not cfg.optimizer_offload:
        return 0.0
    shard = cfg.shard_size(group)
    per = state_bytes_per_param(t, cfg.engine, cfg.zero, shard, fp8_weight)
    return params * per.optimizer + owned_params(cfg, params, shard) * FP32_BYTES


def _link_bytes(t: TrainingSpec, cfg: ParallelConfig) -> tuple[float, float]:
    """(device-to-host, host-to-device) bytes per owned parameter and step (module docstring).
    DeepSpeed accumulates the micro-batches' gradients on the host: from the second
    micro-batch of a step each backward copies the host's running sum of the owned gradients
    to the GPU, adds its own and copies it back (deepspeed 0.19.8 runtime/zero/stage_1_and_2.py
    async_accumulate_grad_in_cpu_via_gpu, called by copy_grads_in_partition for every
    micro-batch of an accumulating step): m copies out and m - 1 in, then the parameters in.
    Those copies are counted as exposed (not hidden under the backward)."""
    p16 = DTYPE_BYTES[DTYPE_BF16 if t.dtype == DTYPE_FP8 else t.dtype]
    if cfg.engine == ENGINE_DEEPSPEED:
        m = max(1, cfg.micro_batches(t.global_batch_size))
        return float(m * p16), float(m * p16)
    return float(grad_dtype_bytes(t)), float(FP32_BYTES)


def gpus_per_host(cluster: ClusterSpec) -> int:
    """GPUs whose CPU steps share one node's host memory and its bandwidth."""
    return max(1, min(cluster.gpus_per_node, cluster.num_gpus))


def offload_step_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params: float, shard: int,
                   optimizer_bytes_per_param: float) -> float:
    """The offloaded optimizer step of `params` on one rank (module docstring): the longest
    of the gradient copy to the host, the CPU step and the parameter copy back.
    `optimizer_bytes_per_param`: K, the optimizer's state bytes per parameter unsharded."""
    gpu = cluster.gpu
    owned = owned_params(cfg, params, shard)
    link_b_s = gpu.host_link_gb_s * 1e9 * gpu.link_efficiency
    d2h, h2d = _link_bytes(t, cfg)
    dram_b_s = gpu.host_dram_gb_s * 1e9 * gpu.host_memory_efficiency / gpus_per_host(cluster)
    if link_b_s <= 0 or dram_b_s <= 0:
        return math.inf  # a part without host numbers (catalog: none): never chosen, validate refuses it
    cpu_s = owned * (2 * optimizer_bytes_per_param + 3 * FP32_BYTES) / dram_b_s
    return max(owned * d2h / link_b_s, cpu_s, owned * h2d / link_b_s)


def host_need_bytes(cluster: ClusterSpec, per_gpu_bytes: float) -> float:
    """Host memory one node needs for its GPUs' offloaded states (the fullest rank's, on each)."""
    return per_gpu_bytes * gpus_per_host(cluster)


def host_capacity_bytes(cluster: ClusterSpec) -> float:
    return float(cluster.host_memory_gb or 0.0) * 1e9
