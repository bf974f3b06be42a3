"""Model states of a layer on one GPU (weights, gradients, optimizer states, as the engine
allocates them: state_bytes_per_param) and the time that goes with them: the gradient
sync and ZeRO-3 traffic (dp.py) and the memory-bound optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.engines import kernels
from cost_model.engines.states import (
    fp8_weight_bytes,
    grad_dtype_bytes,
    optimizer_bytes_per_param,
    state_bytes_per_param,
)
from cost_model.hardware import compute
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec
from cost_model.terms.dp import (
    dense_dp_size,
    expert_dp_size,
    expert_dp_stride,
    grad_sync_exposed_s,
    grad_sync_s,
    zero3_s,
)
from cost_model.terms.geometry import BlockCompute
from cost_model.terms.offload import host_bytes, offload_step_s


def layer_state_bytes(
    t: TrainingSpec, cfg: ParallelConfig, params: float, group: int, fp8_weight: float = 0.0
) -> tuple[float, float, float]:
    """Weights, gradients and optimizer states of `params` replicated over a data-parallel
    group of `group` ranks, sharded as the ZeRO stage says over the group, or under hybrid
    sharding over its shard group (ParallelConfig.shard_size); with the optimizer offload the
    optimizer states are in host memory (offload.host_bytes), none on the GPU."""
    per = state_bytes_per_param(t, cfg.engine, cfg.zero, cfg.shard_size(group), fp8_weight, pipeline=cfg.pp > 1)
    return params * per.weights, params * per.grads, 0.0 if cfg.optimizer_offload else params * per.optimizer


def layer_step_bytes(t: TrainingSpec, cfg: ParallelConfig, params: float, group: int) -> float:
    """Bytes the optimizer step allocates beside the model states for `params` (StateBytes.
    step_transient: DeepSpeed ZeRO's fp32 gradient partition, built in step() and freed after
    it, runtime/zero/stage_1_and_2.py; the runtime's flat fp32 gradient copy): none where the
    step runs on the host (the offloaded partition is the host's)."""
    if cfg.optimizer_offload:
        return 0.0
    per = state_bytes_per_param(t, cfg.engine, cfg.zero, cfg.shard_size(group), pipeline=cfg.pp > 1)
    return params * per.step_transient


def optimizer_step_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params: float, group: int) -> float:
    """Optimizer step is memory-bound: each owned parameter reads and writes its optimizer
    states, reads its gradient and writes its 16-bit copy (Adam: fused multi-tensor apply).
    A rank owns 1/shard of a data-parallel group's parameters (layer_state_bytes). Offloaded,
    it runs on the host (offload.offload_step_s)."""
    shard = cfg.shard_size(group)
    k = optimizer_bytes_per_param(t)
    if cfg.optimizer_offload:
        return offload_step_s(cluster, t, cfg, params, shard, k)
    owned = params / (shard if cfg.zero >= 1 else 1)
    g = grad_dtype_bytes(t)
    nbytes = owned * (2 * k + g + kernels.param_gather_bytes(cfg.engine, cluster.gpu, t))
    return compute.memory_bound_time_s(cluster.gpu, nbytes, kernels=1)


@dataclass(frozen=True)
class BlockStates:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    dp_sync_s: float
    zero3_comm_s: float
    optimizer_s: float
    host_bytes: float = 0.0  # offloaded optimizer states in host memory (offload.host_bytes)
    step_bytes: float = 0.0  # allocated only around the optimizer step (layer_step_bytes)


def block_states(cluster, t: TrainingSpec, cfg: ParallelConfig, dense: float, expert: float,
                  c: BlockCompute, fits) -> BlockStates:
    """Model states, gradient sync, ZeRO-3 traffic and optimizer step of a block's dense
    parameters (data-parallel over dp*cp, TP ranks apart) and expert parameters (over
    tp*cp*dp/(ep*etp), etp*ep ranks apart: MoE parallel folding). The expert gathers are not
    hidden under compute (their layer's compute is counted once, with the dense part). The
    gathered ZeRO-3 parameters are the block's working set (activations.block_working_set_bytes).
    Under fp8 training a block's weights feed FP8 GEMMs and carry their FP8 copy
    (fp8_weight_bytes; engine_state_bytes); the few norm and router weights
    among them are counted alike (under 0.1% of a block's parameters)."""
    tp, estride = cfg.tp, expert_dp_stride(cfg)
    dp_size, edp_size = dense_dp_size(cfg), expert_dp_size(cfg)
    f8 = fp8_weight_bytes(cluster.gpu, t, cfg.engine)
    w1, g1, o1 = layer_state_bytes(t, cfg, dense, dp_size, f8)
    w2, g2, o2 = layer_state_bytes(t, cfg, expert, edp_size, f8)
    dp_sync = grad_sync_s(cluster, t, cfg, dense, dp_size, tp, fits)
    dp_sync += grad_sync_s(cluster, t, cfg, expert, edp_size, estride, fits)
    zero3 = zero3_s(cluster, t, cfg, dense, dp_size, tp, c.fwd_s, c.bwd_s, fits)
    zero3 += zero3_s(cluster, t, cfg, expert, edp_size, estride, 0.0, 0.0, fits) if expert else 0.0
    opt = optimizer_step_s(cluster, t, cfg, dense, dp_size) + optimizer_step_s(cluster, t, cfg, expert, edp_size)
    opt += grad_sync_exposed_s(cluster, t, cfg, [(dense, dp_size, tp), (expert, edp_size, estride)], fits)
    host = host_bytes(t, cfg, dense, dp_size, f8) + host_bytes(t, cfg, expert, edp_size, f8)
    step = layer_step_bytes(t, cfg, dense, dp_size) + layer_step_bytes(t, cfg, expert, edp_size)
    return BlockStates(w1 + w2, g1 + g2, o1 + o2, dp_sync, zero3, opt, host, step)
