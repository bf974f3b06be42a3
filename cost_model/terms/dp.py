"""Data-parallel communication: the gradient sync (bucketed, overlapped with the last backward:
PyTorch DDP, Li et al. VLDB'20; Megatron --overlap-grad-reduce), its exposed last bucket, and
ZeRO-3's per-micro-batch parameter all-gathers and gradient reduce-scatters, prefetched so that
only the excess over the layer's compute is exposed (Rajbhandari et al. 2020 §5).
"""

from __future__ import annotations

from cost_model.engines import kernels
from cost_model.engines.states import grad_dtype_bytes
from cost_model.engines.support import get_engine
from cost_model.hardware import comm, compute
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.specs.vocab import DTYPE_BYTES, ENGINE_DEEPSPEED, ENGINE_MEGATRON
from cost_model.terms.activations import activation_dtype_bytes, reduce_bytes
from cost_model.terms.overlap import overlapped_s
from cost_model.terms.params import block_keys, block_params

# Megatron-Core DDP bucket: max(40M, 1M x dp) parameters (megatron/core/distributed/
# distributed_data_parallel_config.py bucket_size; DistributedDataParallel.__init__ @d98e8a6)
MEGATRON_BUCKET_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_DP = 1_000_000


# --------------------------------------------------------------------------- helpers


def dense_dp_size(cfg: ParallelConfig) -> int:
    return cfg.dense_dp_size


def expert_dp_size(cfg: ParallelConfig) -> int:
    return cfg.expert_dp_size


def expert_dp_stride(cfg: ParallelConfig) -> int:
    """Expert-DP group members are etp*ep ranks apart (expert generator order tp-ep-dp-pp)."""
    return cfg.etp * cfg.ep


def reduces_every_micro_batch(cfg: ParallelConfig) -> bool:
    """ZeRO-2 as the engine runs it reduces gradients in every micro-batch's backward (torchtitan's
    FSDP2 without resharding, which also gathers in every forward; DeepSpeed stage 2), not once
    per step (Megatron's distributed optimizer, the runtime's): engines.ShardingMode.every_micro_batch.
    Not under a pipeline: torch's pipelining stage runs a step's micro-batches with FSDP's
    gradient sync and post-backward reshard off until its last (torch/distributed/pipelining/
    stage.py backward_maybe_with_nosync, perform_reduce_grad; torch 2.13), and DeepSpeed's
    pipeline engine refuses stage 2."""
    if cfg.zero != 2 or cfg.pp > 1:
        return False
    mode = get_engine(cfg.engine).sharding_mode(2)
    return mode is not None and bool(mode.every_micro_batch)


def hybrid_groups(cfg: ParallelConfig, size: int, stride: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((ranks, stride) of the shard group, (ranks, stride) of the replica group) of a
    data-parallel group of `size` ranks `stride` apart. Without hybrid sharding the shard
    group is the whole group and the replica group one rank. With dp_replicate = R the
    outermost R-way split of the group replicates: the shard group is size/R consecutive
    members, the replica group R members size/R members apart (torch FSDP2 HSDP mesh
    (replicate, shard), torchtitan parallel_dims.py ["dp_replicate", "dp_shard", "cp", "tp"];
    Megatron-Core parallel_state.py: intra-partial groups are consecutive slices of the
    dp-cp group)."""
    shard = cfg.shard_size(size)
    return (shard, stride), (size // shard, stride * shard)


def replica_all_reduce_s(cluster: ClusterSpec, nbytes: float, size: int, stride: int, cfg: ParallelConfig,
                         fits) -> float:
    """Hybrid sharding's all-reduce of each shard's reduced gradients (`nbytes` = the full
    gradient bytes; a rank holds 1/shard of them) across the replica groups: Megatron-Core
    start_grad_sync's inter-instance all-reduce after the intra-instance reduce-scatter
    (distributed/param_and_grad_buffer.py, megatron-core 0.16.1); torch FSDP2 HSDP's
    all-reduce over the replicate mesh dim after the reduce-scatter (fully_shard
    _fsdp_collectives.py foreach_reduce). 0 without hybrid sharding."""
    (shard, _), (replicas, rstride) = hybrid_groups(cfg, size, stride)
    if replicas <= 1:
        return 0.0
    return comm.all_reduce_s(nbytes / shard, replicas, comm.group_link(cluster, replicas, rstride), fits)


def grad_sync_s(
    cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params: float, size: int, stride: int, fits
) -> float:
    """Once-per-step gradient sync of `params` local parameters over a DP group, the part
    that runs under compute (stages.py overlaps it with the last backward).
    zero 0: all-reduce of gradients (grad dtype). zero 1/2 (distributed optimizer):
    reduce-scatter of gradients + all-gather of updated 16-bit parameters (Megatron
    distrib_optimizer.md; ZeRO §5.1-5.2: same 2*Psi volume as all-reduce). The all-gather
    runs under compute where the engine overlaps it: Megatron with --overlap-param-gather
    (the launch emitter emits it with the distributed optimizer) runs it under the next
    forward, which this per-layer term approximates by the same overlap window as the
    gradient reduce-scatter; DeepSpeed's follows the optimizer step (`grad_sync_exposed_s`).
    zero 3: per micro-batch, `zero3_s`. Hybrid sharding (dp_replicate > 1): the reduce-scatter
    and all-gather run over the shard group, and the reduced shards are all-reduced across
    the replicas (replica_all_reduce_s)."""
    if size <= 1 or cfg.zero >= 3 or reduces_every_micro_batch(cfg):
        return 0.0
    gbytes = params * grad_dtype_bytes(t)
    if cfg.zero == 0:
        return comm.all_reduce_s(gbytes, size, comm.group_link(cluster, size, stride), fits)
    # DeepSpeed's all-gather follows the optimizer step (grad_sync_exposed_s)
    gather = 0.0 if cfg.engine == ENGINE_DEEPSPEED else params * kernels.param_gather_bytes(cfg.engine, cluster.gpu, t)
    return sharded_sync_s(cluster, cfg, gbytes, gather, size, stride, fits)


def sharded_sync_s(cluster: ClusterSpec, cfg: ParallelConfig, grad_bytes: float, gather_bytes: float, size: int,
                   stride: int, fits) -> float:
    """A sharded optimizer's sync over a data-parallel group of `size` ranks `stride` apart: the
    reduce-scatter of `grad_bytes` over the shard group, the all-reduce of the reduced shards
    across the replicas (replica_all_reduce_s; none without hybrid sharding) and the
    all-gather of `gather_bytes` of updated parameters over the shard group (0: none)."""
    (shard, sstride), _ = hybrid_groups(cfg, size, stride)
    link = comm.group_link(cluster, shard, sstride)
    out = comm.reduce_scatter_s(grad_bytes, shard, link, fits) + replica_all_reduce_s(cluster, grad_bytes, size, stride,
                                                                                      cfg, fits)
    return out + (comm.all_gather_s(gather_bytes, shard, link, fits) if gather_bytes > 0 else 0.0)


def grad_sync_exposed_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, groups: list[tuple[float, int, int]],
                  fits) -> float:
    """The all-gather of the updated 16-bit parameters of a ZeRO-1/2 optimizer that runs
    after the optimizer step, unhidden: DeepSpeed stage 1/2 (deepspeed/runtime/zero/
    stage_1_and_2.py step(): all_gather_dp_groups after the update). Priced in the step's
    tail with the optimizer. Megatron with --overlap-param-gather (emitted) and the other
    engines: in `grad_sync_s`."""
    if cfg.zero not in (1, 2) or cfg.engine != ENGINE_DEEPSPEED:
        return 0.0
    return sum(comm.all_gather_s(params * DTYPE_BYTES[t.dtype], size, comm.group_link(cluster, size, stride), fits)
               for params, size, stride in groups if size > 1 and params > 0)


def dp_last_bucket_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params_rank: float, fits) -> float:
    """Megatron's bucketed overlap leaves the last gradient bucket exposed after the last
    backward (it is reduced when its last gradient arrives), and with
    --overlap-param-gather the first bucket's all-gather before the first forward. Bucket:
    max(40M, 1M x dp) parameters (MEGATRON_BUCKET_PARAMS), at most the rank's parameters.
    Charged once per rank with the embedding (the first layers' bucket is the last one)."""
    size = dense_dp_size(cfg)
    if cfg.engine != ENGINE_MEGATRON or size <= 1 or cfg.zero >= 3:
        return 0.0
    return bucket_sync_s(cluster, t, cfg, params_rank, size, cfg.tp, fits)


def bucket_sync_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params_rank: float, size: int,
                   stride: int, fits) -> float:
    """One Megatron DDP bucket's gradient reduction (and with the distributed optimizer its
    parameter all-gather) over a group of `size` ranks `stride` apart (dp_last_bucket_s)."""
    bucket = min(params_rank, max(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP * dense_dp_size(cfg)))
    gbytes = bucket * grad_dtype_bytes(t)
    if cfg.zero == 0:
        return comm.all_reduce_s(gbytes, size, comm.group_link(cluster, size, stride), fits)
    return sharded_sync_s(cluster, cfg, gbytes, bucket * kernels.param_gather_bytes(cfg.engine, cluster.gpu, t), size,
                          stride, fits)


def expert_last_bucket_s(m: TransformerSpec, cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, fits) -> float:
    """The same exposed last / first bucket of the expert parameters: Megatron-Core DDP puts
    them in their own buffers over the expert-data-parallel group, bucketed with the same
    bucket size (megatron/core/distributed/distributed_data_parallel.py @92c8482e6d:
    ddp_config.bucket_size = max(40M, 1M x data-parallel size); expert_parallel_buffers /
    expert_parallel_bucket_groups from _allocate_buffers_for_parameters(expert_parallel_params,
    intra_expt_dp_group)), so the first MoE blocks' expert gradients form a last bucket of
    their own, reduced after the backward, and its all-gather precedes the first forward. On
    the same links as the dense buckets', so added to theirs. At most the rank's expert
    parameters."""
    size = expert_dp_size(cfg)
    if cfg.engine != ENGINE_MEGATRON or m.moe is None or size <= 1 or cfg.zero >= 3:
        return 0.0
    moe_blocks = sum(moe for moe, _ in block_keys(m))
    _, expert = block_params(m, cfg, True)
    return bucket_sync_s(cluster, t, cfg, expert * moe_blocks / cfg.pp, size, expert_dp_stride(cfg), fits)


def zero3_s(
    cluster: ClusterSpec,
    t: TrainingSpec,
    cfg: ParallelConfig,
    params: float,
    size: int,
    stride: int,
    fwd_compute_s: float,
    bwd_compute_s: float,
    fits,
) -> float:
    """ZeRO-3 per micro-batch: all-gather the parameters for forward and for backward,
    reduce-scatter gradients; prefetch overlaps them with the layer's compute. Gathered in
    16 bits (FSDP2 param_dtype bf16, DeepSpeed's 16-bit copy; fp8 where Megatron gathers FP8
    parameters, --fp8-param-gather, emitted with fp8; torchtitan's Float8 weights with
    training.fp8_all_gather: engines.fp8_all_gather_rule), reduced in the engine's reduce dtype
    (reduce_bytes: torchtitan's FSDP2 mixed_precision_reduce is float32, its only
    choice in 0.3.0). Plus the buffer copies around them, which run on the compute stream and
    are not hidden: the gathered flat buffer is copied out into the layer's parameters after
    each gather, and the gradients into the flat reduce-scatter input (torch FSDP2, fully_shard
    _fsdp_collectives.py: foreach_all_gather_copy_out, foreach_reduce; DeepSpeed ZeRO-3
    flattens and copies likewise): one read and one write of 2 W + G bytes. Hybrid sharding
    (torch FSDP2 HSDP): the gathers and the reduce-scatter run over the shard group, and every
    backward all-reduces the reduced shard across the replicas (replica_all_reduce_s:
    torchtitan 0.3.0 runs each micro-batch's backward with gradient sync on, trainer.py
    train_step's accumulation loop).
    A ZeRO-2 that reduces every micro-batch (reduces_every_micro_batch) pays the same per
    micro-batch without the backward all-gather: torchtitan's FSDP2 without resharding gathers
    in forward and reduce-scatters in backward; DeepSpeed stage 2 only reduce-scatters (its
    all-gather follows the step: grad_sync_exposed_s), copying the gradients into its
    contiguous buckets."""
    every_micro = reduces_every_micro_batch(cfg)
    if size <= 1 or (cfg.zero < 3 and not every_micro):
        return 0.0
    (shard, sstride), _ = hybrid_groups(cfg, size, stride)
    link = comm.group_link(cluster, shard, sstride)
    if cfg.engine == ENGINE_MEGATRON:
        gather = kernels.param_gather_bytes(cfg.engine, cluster.gpu, t)  # FP8 parameters (MXFP8: staged bf16)
    elif t.fp8_all_gather:
        gather = DTYPE_BYTES[t.dtype]  # torchtitan's float8 weights
    else:
        gather = activation_dtype_bytes(t)
    wbytes = params * gather
    gbytes = params * reduce_bytes(t, cfg.engine)
    gathers_fwd = cfg.zero >= 3 or cfg.engine != ENGINE_DEEPSPEED
    gathers_bwd = cfg.zero >= 3
    fwd = comm.all_gather_s(wbytes, shard, link, fits) if gathers_fwd else 0.0
    bwd = comm.all_gather_s(wbytes, shard, link, fits) if gathers_bwd else 0.0
    bwd += comm.reduce_scatter_s(gbytes, shard, link, fits) + replica_all_reduce_s(cluster, gbytes, size, stride, cfg, fits)
    gamma = cluster.gpu.overlap_interference
    copied = (gathers_fwd + gathers_bwd) * wbytes + gbytes
    copies = compute.memory_bound_time_s(cluster.gpu, 2 * copied, kernels=1 + gathers_fwd + gathers_bwd)
    return overlapped_s(fwd, fwd_compute_s, gamma) + overlapped_s(bwd, bwd_compute_s, gamma) + copies
