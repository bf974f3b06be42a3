"""Per-layer cost table: what one block (and the embedding / output layer) costs one GPU for
one micro-batch under given degrees. The pipeline composition (stages.py), the estimate and
the planner's ILP all read this one table, so they agree by construction.

Times are per micro-batch. Communication inside a layer follows Megatron-LM:
- TP (Shoeybi et al. 2019 §3): 2 all-reduces of the b*s*h activations in forward and 2 in
  backward per block; with sequence parallelism (Korthikanti §4.2.2) each all-reduce
  becomes an all-gather + reduce-scatter of the same total volume. Exposed, except where the
  engine runs them under the GEMMs (Megatron's backward async collectives; with
  --tp-comm-overlap every one of them, kernels.TpCommOverlap).
- CP (ring attention, Liu et al. 2023; Megatron-Core context parallel; torch's
  context_parallel ring for the SDPA engines): cp-1 exchanges of the local K/V chunk
  forward, K/V + dK/dV backward (torch's ring: repeated K/V, fp32 dK/dV), overlapped with
  the attention core: only the excess is exposed; the ring's per-step copies and fp32
  gradient accumulation are memory passes of the core (_attention_core_s).
- EP (DeepSeek-V3 §3.2; Megatron-Core MoE): all-to-all dispatch + combine of the routed
  tokens forward and backward, not overlapped; expert layers folded over tp*cp*dp with
  their own ep x etp (moe.py).
- ZeRO-3 (Rajbhandari et al. 2020 §5): parameters all-gathered before forward and before
  backward and gradients reduce-scattered after backward, every micro-batch, prefetched
  so that only the excess over the layer's compute is exposed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

from cost_model.engines import kernels
from cost_model.engines import support as engines
from cost_model.hardware import calibration, comm, compute
from cost_model.model import attention, flops
from cost_model.specs.inputs import (
    CalibrationProfile,
    ClusterSpec,
    LayerListSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)
from cost_model.specs.vocab import (
    ATTENTION_EAGER,
    CP_A2A,
    CP_A2A_P2P,
    CP_ALL_GATHER,
    DTYPE_BF16,
    DTYPE_BYTES,
    DTYPE_FP8,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    KIND_BLOCK,
    KIND_EMBEDDING,
    KIND_LOGITS,
    KIND_MOE_BLOCK,
    MLP_SWIGLU,
    POSITION_ROPE,
)
from cost_model.terms import memory, moe

FLASH_BWD_FACTOR = 2.5  # FlashAttention-2 backward does 5 matmuls to forward's 2 (Dao 2023 §3.2)
# Megatron-Core DDP bucket: max(40M, 1M x dp) parameters (megatron/core/distributed/
# distributed_data_parallel_config.py bucket_size; DistributedDataParallel.__init__ @d98e8a6)
MEGATRON_BUCKET_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_DP = 1_000_000


@dataclass(frozen=True)
class LayerCost:
    """One layer on one GPU for one micro-batch (times in s, sizes in bytes)."""

    name: str
    compute_s: float  # forward + backward compute, comm excluded
    fwd_s: float  # forward compute only (the recompute cost of a fully recomputed layer)
    tp_comm_s: float  # exposed, forward + backward
    cp_comm_s: float
    ep_comm_s: float
    zero3_comm_s: float  # exposed parameter gathers / gradient reduce-scatter
    recompute_full_s: float  # extra time if the layer is fully recomputed
    recompute_selective_s: float  # extra time under selective recompute
    act: memory.ActivationBytes
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    dp_sync_s: float  # per-step gradient sync of this layer's parameters (zero 0-2)
    optimizer_s: float  # per-step optimizer update of this layer's shard
    flops_model: float  # model FLOPs (fwd+bwd) of the whole layer for one micro-batch, all TP ranks
    # live only while the layer runs: a block's backward working set, the output layer's loss
    # transient (memory.block_working_set_bytes, memory.loss_transient_bytes)
    transient_bytes: float = 0.0
    # with the overlapped 1F1B all-to-all (ParallelConfig.moe_a2a_overlap): ep_comm_s is what
    # stays exposed when this layer's forward and backward each run combined with another
    # micro-batch's (moe.combined_pair_s); a forward or backward run alone (pipeline warm-up,
    # cool-down) exposes half of this more each (stages.rank_cost)
    ep_unpaired_s: float = 0.0
    # of compute_s (its forward share also in fwd_s): the wait on the host's kernel issue of a
    # host-synchronised MoE layer beyond its device time (_host_bound_excess_s)
    host_wait_s: float = 0.0

    @property
    def time_s(self) -> float:
        """Forward + backward with exposed communication, no recomputation."""
        return self.compute_s + self.tp_comm_s + self.cp_comm_s + self.ep_comm_s + self.zero3_comm_s

    @property
    def state_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


@dataclass(frozen=True)
class LayerTable:
    """Costs of every block in model order plus the first/last-stage extras."""

    blocks: tuple[LayerCost, ...]
    embedding: LayerCost  # on the first pipeline stage
    output: LayerCost  # final norm + logits + loss, on the last pipeline stage
    p2p_s: float  # one activation send/recv between adjacent stages (per direction)
    sources: dict[str, str] = field(default_factory=dict)
    # priced for Megatron-Core's overlapped 1F1B all-to-all (ParallelConfig.moe_a2a_overlap):
    # the blocks' ep_comm_s are their combined-step exposure, ep_unpaired_s what a forward or
    # backward run alone adds; the schedule holds one more warm-up forward (stages.rank_cost)
    combined_1f1b: bool = False

    @cached_property
    def _kinds(self) -> tuple[tuple[LayerCost, ...], tuple[int, ...]]:
        """The distinct block costs (by value, in order of first appearance) and each block's
        index among them. Blocks of one kind are usually one shared object, so each
        distinct object is hashed once (a LayerCost's hash walks all its fields)."""
        objects = {id(b): b for b in self.blocks}  # valid while self.blocks holds them
        index_of: dict[LayerCost, int] = {}
        kind_of_id = {i: index_of.setdefault(b, len(index_of)) for i, b in objects.items()}
        return tuple(index_of), tuple(kind_of_id[id(b)] for b in self.blocks)

    @property
    def block_kinds(self) -> tuple[LayerCost, ...]:
        """The distinct block costs, in order of first appearance (compared by value)."""
        return self._kinds[0]

    @property
    def block_kind_index(self) -> tuple[int, ...]:
        """For each block, its index in `block_kinds`."""
        return self._kinds[1]

    @cached_property
    def block_kind_counts(self) -> tuple[int, ...]:
        """How many blocks of each kind of `block_kinds`."""
        counts = [0] * len(self.block_kinds)
        for i in self.block_kind_index:
            counts[i] += 1
        return tuple(counts)

    @cached_property
    def block_act_peak_bytes(self) -> float:
        """A fully recomputed block's activations live again during its backward
        (Korthikanti §5): a rank that recomputes holds the largest block's, at most."""
        return max((b.act.none for b in self.blocks), default=0.0)

    @cached_property
    def zero3_buffer_bytes(self) -> float:
        """The backward working set of the block in flight (memory.block_working_set_bytes:
        activation gradients, and with zero 3 the gathered parameters of the current and the
        prefetched block and its unsharded gradient), the largest block's; the name is the
        ZeRO-3 buffer it once was alone."""
        return max((b.transient_bytes for b in self.blocks), default=0.0)

    @cached_property
    def selective_buffer_bytes(self) -> float:
        """Under selective recompute, what a block re-materialises during its backward: the
        tensors its policy drops (act.none - act.selective), the largest block's."""
        return max((b.act.none - b.act.selective for b in self.blocks), default=0.0)


_ZERO_ACT = memory.ActivationBytes(0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- helpers


def _dense_dp_size(cfg: ParallelConfig) -> int:
    return cfg.dense_dp_size


def _expert_dp_size(cfg: ParallelConfig) -> int:
    return cfg.expert_dp_size


def _expert_dp_stride(cfg: ParallelConfig) -> int:
    """Expert-DP group members are etp*ep ranks apart (expert generator order tp-ep-dp-pp)."""
    return cfg.etp * cfg.ep


def _state(
    t: TrainingSpec, cfg: ParallelConfig, params: float, shard: int, fp8_weight: float = 0.0
) -> tuple[float, float, float]:
    per = memory.state_bytes_per_param(t, cfg.engine, cfg.zero, shard, fp8_weight)
    return params * per.weights, params * per.grads, params * per.optimizer


def _tp_sync_s(nbytes: float, tp: int, link, fits, sequence_parallel: bool) -> float:
    """One Megatron f/g operator on a b*s*h activation: an all-reduce (Shoeybi et al. 2019,
    fig. 3), or with sequence parallelism an all-gather plus a reduce-scatter (Korthikanti
    et al. 2022, sec. 4.2.2). The ring formulas make the two equal; measured fits (a
    profile's per-collective alpha-beta) can tell them apart."""
    if sequence_parallel:
        return comm.all_gather_s(nbytes, tp, link, fits) + comm.reduce_scatter_s(nbytes, tp, link, fits)
    return comm.all_reduce_s(nbytes, tp, link, fits)


def _dp_sync_s(
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
    gradient reduce-scatter; DeepSpeed's follows the optimizer step (`_dp_exposed_s`).
    zero 3: per micro-batch, `_zero3_s`."""
    if size <= 1 or cfg.zero >= 3:
        return 0.0
    link = comm.group_link(cluster, size, stride)
    gbytes = params * memory.grad_dtype_bytes(t)
    if cfg.zero == 0:
        return comm.all_reduce_s(gbytes, size, link, fits)
    rs = comm.reduce_scatter_s(gbytes, size, link, fits)
    if cfg.engine == ENGINE_DEEPSPEED:
        return rs
    return rs + comm.all_gather_s(params * kernels.param_gather_bytes(cfg.engine, cluster.gpu, t), size, link, fits)


def _dp_exposed_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, groups: list[tuple[float, int, int]],
                  fits) -> float:
    """The all-gather of the updated 16-bit parameters of a ZeRO-1/2 optimizer that runs
    after the optimizer step, unhidden: DeepSpeed stage 1/2 (deepspeed/runtime/zero/
    stage_1_and_2.py step(): all_gather_dp_groups after the update). Priced in the step's
    tail with the optimizer. Megatron with --overlap-param-gather (emitted) and the other
    engines: in `_dp_sync_s`."""
    if cfg.zero not in (1, 2) or cfg.engine != ENGINE_DEEPSPEED:
        return 0.0
    return sum(comm.all_gather_s(params * DTYPE_BYTES[t.dtype], size, comm.group_link(cluster, size, stride), fits)
               for params, size, stride in groups if size > 1 and params > 0)


def _dp_last_bucket_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params_rank: float, fits) -> float:
    """Megatron's bucketed overlap leaves the last gradient bucket exposed after the last
    backward (it is reduced when its last gradient arrives), and with
    --overlap-param-gather the first bucket's all-gather before the first forward. Bucket:
    max(40M, 1M x dp) parameters (MEGATRON_BUCKET_PARAMS), at most the rank's parameters.
    Charged once per rank with the embedding (the first layers' bucket is the last one)."""
    size = _dense_dp_size(cfg)
    if cfg.engine != ENGINE_MEGATRON or size <= 1 or cfg.zero >= 3:
        return 0.0
    return _bucket_sync_s(cluster, t, cfg, params_rank, size, cfg.tp, fits)


def _bucket_sync_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params_rank: float, size: int,
                   stride: int, fits) -> float:
    """One Megatron DDP bucket's gradient reduction (and with the distributed optimizer its
    parameter all-gather) over a group of `size` ranks `stride` apart (_dp_last_bucket_s)."""
    bucket = min(params_rank, max(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP * _dense_dp_size(cfg)))
    link = comm.group_link(cluster, size, stride)
    gbytes = bucket * memory.grad_dtype_bytes(t)
    if cfg.zero == 0:
        return comm.all_reduce_s(gbytes, size, link, fits)
    gather = bucket * kernels.param_gather_bytes(cfg.engine, cluster.gpu, t)
    return comm.reduce_scatter_s(gbytes, size, link, fits) + comm.all_gather_s(gather, size, link, fits)


def _expert_last_bucket_s(m: TransformerSpec, cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, fits) -> float:
    """The same exposed last / first bucket of the expert parameters: Megatron-Core DDP puts
    them in their own buffers over the expert-data-parallel group, bucketed with the same
    bucket size (megatron/core/distributed/distributed_data_parallel.py @92c8482e6d:
    ddp_config.bucket_size = max(40M, 1M x data-parallel size); expert_parallel_buffers /
    expert_parallel_bucket_groups from _allocate_buffers_for_parameters(expert_parallel_params,
    intra_expt_dp_group)), so the first MoE blocks' expert gradients form a last bucket of
    their own, reduced after the backward, and its all-gather precedes the first forward. On
    the same links as the dense buckets', so added to theirs. At most the rank's expert
    parameters."""
    size = _expert_dp_size(cfg)
    if cfg.engine != ENGINE_MEGATRON or m.moe is None or size <= 1 or cfg.zero >= 3:
        return 0.0
    moe_blocks = sum(moe for moe, _ in _block_keys(m))
    _, expert = _block_params(m, cfg, True)
    return _bucket_sync_s(cluster, t, cfg, expert * moe_blocks / cfg.pp, size, _expert_dp_stride(cfg), fits)


def _zero3_s(
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
    (memory.reduce_bytes: torchtitan's FSDP2 mixed_precision_reduce is float32, its only
    choice in 0.3.0). Plus the buffer copies around them, which run on the compute stream and
    are not hidden: the gathered flat buffer is copied out into the layer's parameters after
    each gather, and the gradients into the flat reduce-scatter input (torch FSDP2, fully_shard
    _fsdp_collectives.py: foreach_all_gather_copy_out, foreach_reduce; DeepSpeed ZeRO-3
    flattens and copies likewise): one read and one write of 2 W + G bytes."""
    if size <= 1 or cfg.zero < 3:
        return 0.0
    link = comm.group_link(cluster, size, stride)
    if cfg.engine == ENGINE_MEGATRON:
        gather = kernels.param_gather_bytes(cfg.engine, cluster.gpu, t)  # FP8 parameters (MXFP8: staged bf16)
    elif t.fp8_all_gather:
        gather = DTYPE_BYTES[t.dtype]  # torchtitan's float8 weights
    else:
        gather = memory.activation_dtype_bytes(t)
    wbytes = params * gather
    gbytes = params * memory.reduce_bytes(t, cfg.engine)
    fwd = comm.all_gather_s(wbytes, size, link, fits)
    bwd = comm.all_gather_s(wbytes, size, link, fits) + comm.reduce_scatter_s(gbytes, size, link, fits)
    gamma = cluster.gpu.overlap_interference
    copies = compute.memory_bound_time_s(cluster.gpu, 2 * (2 * wbytes + gbytes), kernels=3)
    return overlapped_s(fwd, fwd_compute_s, gamma) + overlapped_s(bwd, bwd_compute_s, gamma) + copies


def overlapped_s(comm_s: float, compute_s: float, interference: float) -> float:
    """The overlap rule: exposed time of `comm_s` run alongside `compute_s`, the excess over
    the compute plus `interference` x the hidden part. Equal to the convex
    max(comm - overlap_window_s(compute), overlap_hidden_s(comm)), the linear pieces that
    the planner's ILP and bounds use."""
    return max(0.0, comm_s - compute_s) + interference * min(comm_s, compute_s)


def dp_window_factor(pp: int, vpp: int) -> float:
    """How many backwards of one micro-batch through a rank's layers hide that rank's
    data-parallel gradient sync. 1F1B: the last micro-batch's backward (bucketed reduction
    as in PyTorch DDP, Li et al. VLDB'20; Megatron --overlap-grad-reduce). Interleaved 1F1B:
    a chunk's buckets are reduced when its own last backward ends (megatron/core/distributed/
    param_and_grad_buffer.py register_grad_ready; schedules.py
    forward_backward_pipelining_with_interleaving), and chunk k of vpp then still has
    (vpp-1-k) x pp cooldown backwards of later chunks to run under: 1 + (pp-1)(vpp-1)/vpp
    on average over the chunks."""
    return 1.0 + (pp - 1) * (vpp - 1) / vpp if vpp > 1 else 1.0


def overlap_window_s(compute_s: float, interference: float) -> float:
    """The communication that `compute_s` of compute hides for free (overlapped_s)."""
    return (1 - interference) * compute_s


def overlap_hidden_s(comm_s: float, interference: float) -> float:
    """What `comm_s` costs even when wholly hidden: the interference share (overlapped_s)."""
    return interference * comm_s


def _optimizer_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params: float, shard: int) -> float:
    """Optimizer step is memory-bound: each owned parameter reads and writes its optimizer
    states, reads its gradient and writes its 16-bit copy (Adam: fused multi-tensor apply)."""
    owned = params / (shard if cfg.zero >= 1 else 1)
    k = memory.optimizer_bytes_per_param(t)
    g = memory.grad_dtype_bytes(t)
    nbytes = owned * (2 * k + g + kernels.param_gather_bytes(cfg.engine, cluster.gpu, t))
    return compute.memory_bound_time_s(cluster.gpu, nbytes, kernels=1)


# --------------------------------------------------------------------------- transformer


@dataclass(frozen=True)
class _BlockGeometry:
    """The sizes one GPU sees for one block and micro-batch under cfg's degrees."""

    moe_layer: bool
    tokens: float  # b * s/cp: tokens this GPU processes (all TP ranks see all tokens)
    s_local: float  # s/cp: the local sequence chunk
    rep: int  # tp with SP (the SP region's elementwise work is split), else 1
    act_dt: int  # bytes of one activation element (memory.activation_dtype_bytes)
    index: int = 0  # the block's position (its attention kind)
    kernels: kernels.EngineKernels = kernels.KERNELS[ENGINE_MEGATRON]
    compiled: bool = False
    fp8: bool = False  # fp8 GEMMs (training.dtype fp8)


def _geometry(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig, index: int) -> _BlockGeometry:
    s_local = t.seq_length / cfg.cp
    return _BlockGeometry(
        moe_layer=m.moe is not None and m.moe.is_moe_layer(index),
        tokens=cfg.micro_batch_size * s_local,
        s_local=s_local,
        rep=cfg.tp if cfg.sequence_parallel else 1,
        act_dt=memory.activation_dtype_bytes(t),
        index=index,
        kernels=kernels.for_engine(cfg.engine),
        compiled=t.compile,
        fp8=t.dtype == DTYPE_FP8,
    )


def _attention_dtype(t: TrainingSpec) -> str:
    """FP8 recipes (Transformer Engine, torchao Float8Linear) quantise the linear layers
    only; the attention core stays in bf16 (TE fp8_dpa is off by default; torchao converts
    nn.Linear modules only)."""
    return DTYPE_BF16 if t.dtype == DTYPE_FP8 else t.dtype


def _num_micro_batches(t: TrainingSpec, cfg: ParallelConfig) -> int:
    return max(1, t.global_batch_size // max(1, cfg.dp * cfg.micro_batch_size))


@dataclass(frozen=True)
class _Gemms:
    """Forward GEMMs of one block on one TP rank."""

    total_s: float
    ffn_elems: float  # FFN width the activation function touches per token
    qkv_s: float  # the column-parallel input projections (their backward hides TP comm)
    up_s: float  # the MLP's column-parallel up (+ gate) projection
    act_in_elems: float  # activation-input elements of all GEMMs per token (fp8 casts)
    grad_out_elems: float  # output-gradient elements of all GEMMs per token
    weight_elems: float  # weight elements of all GEMMs (fp8 weight casts)
    out_s: float = 0.0  # the row-parallel attention output projection (hides its reduce-scatter
    down_s: float = 0.0  # the MLP's row-parallel down projection        under --tp-comm-overlap)
    experts_s: float = 0.0  # the routed experts' grouped GEMMs (MoE blocks; the overlapped 1F1B's mlp node)


def _gemms_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry) -> _Gemms:
    """Forward GEMMs of one block per TP shard (Megatron column/row-parallel splits,
    Shoeybi et al. 2019 §3): the attention projections of attention.sharded_projections
    (MHA/GQA Q, K, V, O; MLA's down/up projections), and the dense MLP or the MoE experts
    (balanced routing: each local expert gets tokens*top_k*ep/E tokens), shared experts and
    router. FP8 runs them at the fp8 rate (the casts are priced in _fp8_casts_s)."""
    dt, tp, tokens = t.dtype, cfg.tp, geo.tokens
    h = m.hidden_size
    n_up = 2 if m.mlp == MLP_SWIGLU else 1
    qkv_s = out_s = 0.0
    act_in = grad_out = weights = 0.0
    for name, n, k in attention.sharded_projections(m, tp):
        g = compute.gemm_time_s(gpu, dt, tokens, n, k)
        if name == "out":
            out_s += g
        else:
            qkv_s += g
        act_in, grad_out, weights = act_in + k, grad_out + n, weights + n * k
    if not geo.moe_layer:
        f = m.ffn_hidden_size
        up_s = compute.gemm_time_s(gpu, dt, tokens, n_up * f / tp, h)
        down_s = compute.gemm_time_s(gpu, dt, tokens, h, f / tp)
        act_in += h + f / tp
        grad_out += n_up * f / tp + h
        weights += (n_up + 1) * f * h / tp
        return _Gemms(qkv_s + out_s + up_s + down_s, f, qkv_s, up_s, act_in, grad_out, weights, out_s, down_s)
    e = m.moe
    moe_s, f_elem, experts_s = _moe_fwd_s(m, gpu, t, cfg, geo)
    f = e.ffn_hidden_size
    n_local = max(1, e.num_experts // cfg.ep)
    # elements the fp8 casts touch (_fp8_casts_s): each token's top_k expert inputs/outputs
    act_in += e.top_k * (h + f / tp)
    grad_out += e.top_k * (n_up * f / tp + h)
    weights += n_local * (n_up + 1) * f * h / tp
    if e.num_shared_experts:
        fs = e.shared_ffn * e.num_shared_experts
        act_in += h + fs / tp
        grad_out += n_up * fs / tp + h
        weights += (n_up + 1) * fs * h / tp
    # the expert GEMMs hide no TP collective (their tokens arrive by all-to-all): up_s 0
    return _Gemms(qkv_s + out_s + moe_s, f_elem, qkv_s, 0.0, act_in, grad_out, weights, experts_s=experts_s)


def _moe_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig,
               geo: _BlockGeometry) -> tuple[float, float, float]:
    """The expert part of an MoE block's forward (moe.py): grouped expert GEMMs on the
    tokens each local expert receives, shared experts, router, token (un)permutation, the
    kernel launches, and the experts' output bias where the engine adds it outside the GEMM.
    Returns (seconds, FFN width the activation function touches per token, as
    _elementwise_fwd_s counts it: top_k routed copies at the busiest rank's load plus the
    shared experts, and the routed experts' grouped GEMMs alone: the overlapped 1F1B's mlp
    node, _combined_saving_s)."""
    e = m.moe
    lay = moe.layout(m, t, cfg)
    experts = moe.expert_gemms_fwd_s(m, gpu, t, lay)
    s = experts + moe.shared_expert_gemms_fwd_s(m, gpu, t, cfg, geo.tokens)
    s += moe.router_fwd_s(m, gpu, t, lay, geo.act_dt)
    s += moe.permute_fwd_s(m, gpu, lay, geo.act_dt, cfg.moe_dispatcher)
    s += moe.launch_overhead_fwd_s(m, gpu, cfg, lay, _quantize_kernels(gpu, t, cfg, geo))
    s += moe.expert_bias_fwd_s(m, gpu, lay, geo.kernels.expert_bias)
    return s, e.ffn_hidden_size * e.top_k * lay.imbalance + e.shared_ffn * e.num_shared_experts, experts


def _fp8_casts(gpu, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry) -> kernels.Fp8Casts:
    """The engine's fp8 casts under the recipe it runs on this GPU (kernels.fp8_recipe)."""
    return geo.kernels.fp8_for(geo.compiled, kernels.fp8_recipe(cfg.engine, gpu, t))


def _quantize_kernels(gpu, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry) -> int:
    """Kernels one fp8 quantize launches (kernels.Fp8Casts.quantize_kernels); 0 without fp8."""
    return _fp8_casts(gpu, t, cfg, geo).quantize_kernels if geo.fp8 else 0


def _fp8_casts_s(gpu, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry, g: _Gemms) -> tuple[float, float]:
    """(forward, backward) seconds of the fp8 quantisation kernels around one block's GEMMs
    (kernels.Fp8Casts: memory-bound passes per GEMM input, the output gradient and the
    transposes for the weight gradient), and the cast of the fp8 weight copy: every
    micro-batch for torchao's dynamic scaling, once per step for Transformer Engine
    (amortised over the step's micro-batches). Zero unless training.dtype is fp8."""
    if t.dtype != DTYPE_FP8:
        return 0.0, 0.0
    c = _fp8_casts(gpu, t, cfg, geo)
    w_share = 1.0 if c.weight_per_micro_batch else 1.0 / _num_micro_batches(t, cfg)
    fwd = geo.tokens * g.act_in_elems * c.act_fwd + g.weight_elems * c.weight * w_share
    bwd = geo.tokens * (g.grad_out_elems * c.grad_bwd + g.act_in_elems * c.act_bwd)
    n = 7  # one pass per GEMM input (q/k/v fused, o, up, down ...)
    return compute.memory_bound_time_s(gpu, fwd, kernels=n), compute.memory_bound_time_s(gpu, bwd, kernels=2 * n)


def _attention_keys_per_call(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry) -> tuple[float, int]:
    """(keys per fused-attention kernel call, calls per forward) as the CP variant runs it:
    the whole sequence without CP, after an all-gather of K/V (Llama 3 §3.3.2; Megatron
    cp_comm_type all_gather) or after Ulysses' all-to-all (a2a: full sequence, heads/cp);
    one local K/V chunk of s/cp per ring step (p2p, torch context_parallel ring), in the
    2*cp - 1 half-chunk calls Megatron's load-balanced causal ring makes
    (megatron/core/transformer/dot_product_attention / TE context_parallel.py
    AttnFuncWithCPAndKVP2P). A window bounds the keys."""
    w = attention.window(m, geo.index)
    s = float(t.seq_length)
    kind = _cp_kind(cfg)
    if cfg.cp <= 1 or kind in (CP_ALL_GATHER, CP_A2A):
        keys, calls = s, 1
    elif kind == CP_A2A_P2P:
        inner, outer = attention.a2a_p2p_sizes(m, cfg.tp, cfg.cp)
        keys, calls = s * inner / cfg.cp, outer
    else:
        keys, calls = s / cfg.cp, cfg.cp
    return (min(keys, float(w)) if w else keys), calls


def _attention_core_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry) -> tuple[float, float]:
    """Attention core (QK^T, softmax, PV), forward and backward seconds. Eager: materialised
    scores as batched GEMMs over b * heads plus the memory-bound scale-mask-softmax and
    dropout (Korthikanti §4.1), backward 2x. Flash: the causal pairs only
    (flops.attention_core_flops_causal; windows and chunks), on the engine's fused kernel
    (kernels.py) at the efficiency compute.attention_efficiency gives for the keys per
    call and the head dim; backward FLASH_BWD_FACTOR x the forward FLOPs at the backward
    kernel's efficiency. FP8 recipes keep attention in bf16 (_attention_dtype).
    Under a context-parallel ring (calls > 1) the kernels take the engine's
    ring_attention_slowdown times as long (kernels.MEGATRON_RING_ATTENTION_SLOWDOWN: measured
    end to end on NeMo's long-sequence tables; the ring's K/V sends are priced apart, in
    _block_cp_s, and hide under this time).
    Attention sinks (GPT-OSS, Megatron softmax_type "learnable") and (left, 0) sliding
    windows stay on the fused kernel under Megatron: Transformer Engine disables only
    FlashAttention for a non-vanilla softmax and runs cuDNN's F16_arbitrary_seqlen backend
    with cuDNN >= 9.13.1 (transformer_engine/pytorch/attention/dot_product_attention/utils.py
    get_attention_backend, common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend @v2.9,
    the TE of Megatron-Bridge 25.11; its GPT-OSS provider falls back to the local, unfused
    path only below TE 2.8: src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py @5776a6d);
    the sink's one logit per head adds no priced work."""
    dt, b, d = _attention_dtype(t), cfg.micro_batch_size, m.kv_channels
    heads_local = m.num_attention_heads / cfg.tp
    if t.attention == ATTENTION_EAGER:
        core_s = compute.gemm_time_s(gpu, dt, geo.s_local, t.seq_length, d, batch=b * heads_local)
        core_s += compute.gemm_time_s(gpu, dt, geo.s_local, d, t.seq_length, batch=b * heads_local)
        scores = b * heads_local * geo.s_local * t.seq_length
        mask = 1 if m.dropout else 0
        act_dt = geo.act_dt
        # scale-mask-softmax (read+write) and dropout (read, write, mask)
        core_s += compute.memory_bound_time_s(gpu, scores * (2 * act_dt + (2 * act_dt + mask) * mask), kernels=2)
        return core_s, 2.0 * core_s
    core_flops = flops.attention_core_flops_causal(m, geo.tokens, t.seq_length, geo.index) / cfg.tp
    keys, calls = _attention_keys_per_call(m, t, cfg, geo)
    hd = attention.qk_head_dim(m)
    kern = geo.kernels.attention
    fwd = compute.flash_attention_time_s(gpu, dt, core_flops, keys, hd, kern, calls=calls)
    bwd = compute.flash_attention_time_s(gpu, dt, FLASH_BWD_FACTOR * core_flops, keys, hd, kern, backward=True, calls=calls)
    if calls > 1:  # the kernels of a ring run slower than alone (kernels.MEGATRON_RING_ATTENTION_SLOWDOWN)
        fwd *= geo.kernels.ring_attention_slowdown
        bwd *= geo.kernels.ring_attention_slowdown
    act_dt = DTYPE_BYTES[dt]
    q_elems = geo.tokens * m.num_attention_heads * hd / cfg.tp
    # each backward call's dot(dO, O) preprocess and fp32 dQ accumulate/convert passes
    bwd += compute.memory_bound_time_s(gpu, calls * attention.flash_bwd_call_bytes(q_elems, act_dt), kernels=2 * calls)
    if calls > 1:  # a ring merges each step's partial output into the running one (forward only)
        out_elems = geo.tokens * m.num_attention_heads * attention.v_head_dim(m) / cfg.tp
        fwd += compute.memory_bound_time_s(gpu, calls * out_elems * geo.kernels.ring_merge_bytes, kernels=calls)
        if kern == kernels.ATTN_SDPA:
            # torch's context_parallel ring (the SDPA engines' CP): per-step K/V copies and
            # fp32 gradient accumulation (attention.torch_ring_step_bytes), plus its
            # once-per-call copies, zeroed fp32 buffers and casts (torch_ring_once_bytes);
            # the slowest rank (the last) runs every step on its whole query chunk
            kv_elems = geo.tokens * attention.kv_elems_per_token(m, _repeats_kv(geo)) / cfg.tp
            step_f, step_b = attention.torch_ring_step_bytes(q_elems, kv_elems, act_dt)
            once_f, once_b = attention.torch_ring_once_bytes(q_elems, kv_elems, act_dt)
            fwd += compute.memory_bound_time_s(gpu, (calls - 1) * step_f + once_f, kernels=calls)
            bwd += compute.memory_bound_time_s(gpu, calls * step_b + once_b, kernels=5 * calls)
    return fwd, bwd


def _repeats_kv(geo: _BlockGeometry) -> bool:
    """Whether the engine's model code copies K/V to every query head before the attention
    kernel (eager repeat_kv, kernels.Elementwise.gqa_repeat of the eager table: torchtitan's
    SDPA call; under torch.compile the copy is fused but the kernel still reads a*d-wide K/V)."""
    return geo.kernels.elementwise.gqa_repeat > 0


def _elementwise_fwd_s(m: TransformerSpec, gpu, cfg: ParallelConfig, geo: _BlockGeometry, f_elem: float) -> float:
    """Memory-bound elementwise work of one block's forward, bytes through HBM: two norms,
    two residual adds (+ dropout masks), RoPE on q and k, the MLP activation function
    (Korthikanti §4.1 lists the same tensors), each op's bytes per element as the engine
    launches it (kernels.Elementwise: one fused kernel, or one kernel per torch op in eager
    code; torch.compile fuses). With sequence parallelism the norms, residuals and dropout
    run on s/tp of the tokens (Korthikanti §4.2.2); RoPE and the activation function are in
    the tensor-parallel region, split by tp either way."""
    act_dt, tokens, rep, tp = geo.act_dt, geo.tokens, geo.rep, cfg.tp
    k = geo.kernels.elementwise_for(geo.compiled)
    h, d = m.hidden_size, m.kv_channels
    a, g = m.num_attention_heads, m.num_kv_heads
    sbh_bytes = act_dt * tokens * h / rep
    elem = 2 * k.norm * sbh_bytes  # two norms
    elem += 2 * k.residual * sbh_bytes  # two residual adds (+ dropout)
    if m.dropout:
        elem += 2 * tokens * h / rep  # masks
    if m.position == POSITION_ROPE:
        elem += k.rope * act_dt * tokens * (a + g) * d / tp  # rotate q and k
    if g < a:
        elem += k.gqa_repeat * act_dt * tokens * 2 * a * d / tp  # repeat_kv copies (eager)
    act_bytes = k.swiglu if m.mlp == MLP_SWIGLU else k.gelu
    elem += act_bytes * act_dt * tokens * f_elem / tp
    return compute.memory_bound_time_s(gpu, elem, kernels=k.kernels)


def _glu_clamp_s(m: TransformerSpec, gpu, cfg: ParallelConfig, geo: _BlockGeometry, f_elem: float) -> tuple[float, float]:
    """(forward, backward) seconds of the memory passes a clamped gated activation
    (TransformerSpec.swiglu_limit) adds as the engine runs it (kernels.GluClamp: Megatron's
    eager clamps and concatenation before its fused quick-GEGLU, their autograd masks and
    the split backward), over the f_elem-wide activation output of every token, split by tp
    like the activation itself (_elementwise_fwd_s). Zero without a clamp or where the
    engine's model code has none."""
    clamp = geo.kernels.glu_clamp
    if m.swiglu_limit is None or m.mlp != MLP_SWIGLU or clamp is None:
        return 0.0, 0.0
    elems = geo.tokens * f_elem / cfg.tp
    # one activation call per MLP: the dense MLP, or the routed experts' and the shared experts'
    calls = 1 + (1 if geo.moe_layer and m.moe is not None and m.moe.num_shared_experts else 0)
    fwd = compute.memory_bound_time_s(gpu, elems * (clamp.fwd_a * geo.act_dt + clamp.fwd_bytes),
                                      kernels=calls * clamp.kernels[0])
    bwd = compute.memory_bound_time_s(gpu, elems * (clamp.bwd_a * geo.act_dt + clamp.bwd_bytes),
                                      kernels=calls * clamp.kernels[1])
    return fwd, bwd


@dataclass(frozen=True)
class _BlockCompute:
    fwd_s: float
    bwd_s: float
    core_fwd_s: float  # the attention core's share of the forward (CP hides its ring under it)
    core_bwd_s: float
    source: str  # analytic | profile
    qkv_s: float = 0.0  # forward time of the column-parallel input projections (= their wgrad/dgrad GEMMs)
    up_s: float = 0.0  # forward time of the MLP up projection
    out_s: float = 0.0  # forward time of the row-parallel attention output projection
    down_s: float = 0.0  # forward time of the MLP down projection (0 in MoE blocks: expert GEMMs)
    experts_s: float = 0.0  # forward time of the routed experts' GEMMs (MoE blocks)


def _block_compute(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry,
                   profile: CalibrationProfile | None) -> _BlockCompute:
    """Forward and backward compute of one block: GEMMs + attention core + elementwise,
    backward 2x the GEMMs and elementwise (two GEMMs per forward one, Narayanan et al.
    SC'21 §5.1) plus the core's own backward. A profiled (kind, tp, micro-batch, seq/cp)
    entry replaces the forward and backward totals, or the profile's block rows scale them
    (_profiled), and the core keeps its analytic share of the forward."""
    g = _gemms_fwd_s(m, gpu, t, cfg, geo)
    gemm_s = g.total_s
    core_s, core_bwd_s = _attention_core_s(m, gpu, t, cfg, geo)
    elem_s = _elementwise_fwd_s(m, gpu, cfg, geo, g.ffn_elems)
    # the clamp's backward is not twice its forward: a third of its step total rides in the
    # elementwise forward, which the backward doubles, so the block's total is exact
    elem_s += sum(_glu_clamp_s(m, gpu, cfg, geo, g.ffn_elems)) / 3.0
    cast_fwd, cast_bwd = _fp8_casts_s(gpu, t, cfg, geo, g)
    fwd = gemm_s + core_s + elem_s + cast_fwd
    bwd = 2.0 * (gemm_s + elem_s) + core_bwd_s + cast_bwd
    kind = KIND_MOE_BLOCK if geo.moe_layer else KIND_BLOCK
    fwd_p, bwd_p, source = _profiled(profile, kind, cfg, t, fwd, bwd)
    scale = fwd_p / max(1e-12, fwd) if source != "analytic" else 1.0
    return _BlockCompute(fwd_p, bwd_p, core_s * scale, core_bwd_s, source, g.qkv_s * scale, g.up_s * scale,
                         g.out_s * scale, g.down_s * scale, g.experts_s * scale)


def _tp_overlap(cluster, cfg: ParallelConfig, geo: _BlockGeometry) -> kernels.TpCommOverlap | None:
    """The engine's TP communication/GEMM overlap where it runs (engines.tp_comm_overlap, the
    predicate the launch emitter switches --tp-comm-overlap on), else None."""
    if not engines.tp_comm_overlap(cfg.engine, cfg.tp, cfg.sequence_parallel, cluster.gpus_per_node):
        return None
    return geo.kernels.tp_overlap


def _ring_exchange_s(comm_s: float, gemm_s: float, tp: int, gamma: float) -> float:
    """Exposed time of a collective run as TE's ring exchange beside a GEMM split in tp
    chunks (kernels.TpCommOverlap): chunk i's GEMM runs while chunk i+1 arrives, so tp-1
    chunk GEMMs hide it: total = (tp-1) max(gemm/tp, comm/(tp-1)) + gemm/tp."""
    return overlapped_s(comm_s, gemm_s * (tp - 1) / tp, gamma)


def _pipelined_rs_s(comm_s: float, gemm_s: float, splits: int, gamma: float) -> float:
    """Exposed time of a reduce-scatter pipelined behind a GEMM in `splits` chunks (TE
    'pipeline' method): chunk i's reduce-scatter under chunk i+1's GEMM, the last one after
    the GEMM: comm/n + the overlap rule on the other (n-1)/n."""
    n = max(1, splits)
    return comm_s / n + overlapped_s(comm_s * (n - 1) / n, gemm_s * (n - 1) / n, gamma)


def _block_tp_fwd_s(m: TransformerSpec, cluster, cfg: ParallelConfig, geo: _BlockGeometry, c: _BlockCompute,
                    fits) -> float:
    """Forward TP communication of a block: 2 f/g operators on the b*s*h activation
    (Shoeybi et al. 2019 fig. 3: one after attention, one after the MLP). FP8 with SP
    gathers the column-parallel input already cast to fp8, 1 byte per element (Transformer
    Engine linear.py / layernorm_linear.py forward: cast, then gather_along_first_dim; TE
    userbuffers' all-gather buffers are fp8 under an fp8 recipe, initialize_ub; torchtitan's
    Float8ColwiseParallel / PrepareFloat8ModuleInput, parallelize_llama.py @9dec370).
    Exposed, unless the engine's TP overlap runs (`_tp_overlap`): then the all-gather is a
    ring exchange under the column-parallel GEMM (qkv, fc1) and the reduce-scatter is
    pipelined behind the row-parallel GEMM (proj, fc2); MoE blocks' expert GEMMs hide
    nothing (TE userbuffers are off for expert linears)."""
    ar_bytes = geo.act_dt * geo.tokens * m.hidden_size
    link = comm.group_link(cluster, cfg.tp, 1)
    if cfg.sequence_parallel and cfg.tp > 1:
        ag_bytes = ar_bytes * (DTYPE_BYTES[DTYPE_FP8] / geo.act_dt if geo.fp8 else 1.0)
        ag = comm.all_gather_s(ag_bytes, cfg.tp, link, fits)
        rs = comm.reduce_scatter_s(ar_bytes, cfg.tp, link, fits)
        ov = _tp_overlap(cluster, cfg, geo)
        if ov is None:
            return 2 * (ag + rs)
        gamma = cluster.gpu.overlap_interference
        return sum(_ring_exchange_s(ag, col_s, cfg.tp, gamma) + _pipelined_rs_s(rs, row_s, ov.pipeline_splits, gamma)
                   for col_s, row_s in ((c.qkv_s, c.out_s), (c.up_s, c.down_s)))
    return 2 * _tp_sync_s(ar_bytes, cfg.tp, link, fits, cfg.sequence_parallel)


def _block_tp_bwd_s(m: TransformerSpec, cluster, cfg: ParallelConfig, geo: _BlockGeometry, c: _BlockCompute, fits) -> float:
    """Exposed backward TP communication of a block. Per sublayer (attention, MLP) the
    backward of the f operator before the column-parallel input projection: an all-reduce
    of the input gradient, or with SP a reduce-scatter, plus under SP the backward of g (an
    all-gather of the output gradient) and, where the engine does not keep the gathered
    input, its re-gather for the weight gradient (Korthikanti §4.2.2). Megatron runs the
    all-reduce / reduce-scatter under the projection's weight-gradient GEMM and the
    re-gather under its input-gradient GEMM (kernels.py: LinearWithGradAccumulationAnd-
    AsyncCommunication.backward; TE's bulk dgrad/wgrad overlap does the same); each GEMM
    lasts as long as the forward one. The output-gradient all-gather is exposed, unless the
    engine's TP overlap runs (`_tp_overlap`): then it is a ring exchange under the
    row-parallel layer's input-gradient GEMM (proj_dgrad, fc2_dgrad). Engines without these
    overlaps expose all of it."""
    tp = cfg.tp
    if tp <= 1:
        return 0.0
    link = comm.group_link(cluster, tp, 1)
    nbytes = geo.act_dt * geo.tokens * m.hidden_size
    k = geo.kernels
    gamma = cluster.gpu.overlap_interference
    ov = _tp_overlap(cluster, cfg, geo)
    if cfg.sequence_parallel:
        f_bwd = comm.reduce_scatter_s(nbytes, tp, link, fits)
        g_bwd = comm.all_gather_s(nbytes, tp, link, fits)
        regather = comm.all_gather_s(nbytes, tp, link, fits) if k.sp_regather else 0.0
    else:
        f_bwd, g_bwd, regather = comm.all_reduce_s(nbytes, tp, link, fits), 0.0, 0.0
    total = 0.0
    for gemm_s, row_s in ((c.qkv_s, c.out_s), (c.up_s, c.down_s)):
        g_exposed = _ring_exchange_s(g_bwd, row_s, tp, gamma) if ov is not None else g_bwd
        if k.tp_bwd_overlap:
            total += g_exposed + overlapped_s(f_bwd, gemm_s, gamma) + overlapped_s(regather, gemm_s, gamma)
        else:
            total += g_exposed + f_bwd + regather
    return total


def _cp_kind(cfg: ParallelConfig) -> str:
    return engines.cp_kind(cfg.engine, cfg.cp_comm)


def _block_cp_s(m: TransformerSpec, cluster, cfg: ParallelConfig, geo: _BlockGeometry, c: _BlockCompute, fits) -> float:
    """Exposed context-parallel communication of a block, forward + backward, per variant
    (Megatron-Core --cp-comm-type, megatron/core/extensions/transformer_engine.py ->
    TE attention/context_parallel.py):
    - p2p (ring attention, Liu et al. 2023; torch context_parallel's ring): cp-1 sends of the
      local K/V chunk forward, K/V + dK/dV backward, each step under that step's attention.
      torch's ring (torch/distributed/tensor/experimental/_attention.py; torchtitan @9dec370
      rotates by all-gather, the same bytes) sends the K/V the model passes to SDPA
      (torchtitan: repeated to every query head) and rotates dK/dV in fp32 (convert_to_f32);
    - all_gather (Llama 3 §3.3.2): all-gather of K/V forward, again in backward plus a
      reduce-scatter of dK/dV, all exposed: Transformer Engine gathers and reduce-scatters
      synchronously around the two attention steps (AttnFuncWithCPAndKVAllGather, "KV
      all-gather between CP ranks is exposed", transformer_engine/pytorch/attention/
      dot_product_attention/context_parallel.py @015d22571b);
    - a2a (DeepSpeed-Ulysses, Jacobs et al. 2023): all-to-all of q, k, v in and of the
      output back, the same four in backward, not overlapped;
    - a2a+p2p: the all-to-all inside the inner group, the ring across the rest.
    K/V bytes: attention.kv_elems_per_token (MLA passes the up-projected K and V)."""
    cp, tp = cfg.cp, cfg.tp
    if cp <= 1:
        return 0.0
    gamma = cluster.gpu.overlap_interference
    kv_bytes = geo.act_dt * geo.tokens * attention.kv_elems_per_token(m) / tp
    q_o_bytes = geo.act_dt * geo.tokens * m.num_attention_heads * (attention.qk_head_dim(m) + attention.v_head_dim(m)) / tp
    kind = _cp_kind(cfg)
    # torch's ring wraps the SDPA call, so it moves the K/V the model passes to it (repeated
    # to every query head in torchtitan) and returns dK/dV in fp32 (convert_to_f32, the dkv
    # rotater of _templated_ring_attention_backward); Transformer Engine's ring moves the
    # GQA-width K/V and dK/dV in the activation dtype
    torch_ring = geo.kernels.attention == kernels.ATTN_SDPA
    ring_kv_bytes = geo.act_dt * geo.tokens * attention.kv_elems_per_token(m, torch_ring and _repeats_kv(geo)) / tp
    dkv_ratio = attention.FP32_BYTES / geo.act_dt if torch_ring else 1.0

    def ring(size: int, stride: int, chunk_bytes: float) -> float:
        link = comm.group_link(cluster, size, stride)
        fwd = (size - 1) * comm.send_recv_s(chunk_bytes, link, fits)
        bwd = fwd + (size - 1) * comm.send_recv_s(chunk_bytes * dkv_ratio, link, fits)
        return overlapped_s(fwd, c.core_fwd_s, gamma) + overlapped_s(bwd, c.core_bwd_s, gamma)

    def a2a(size: int, stride: int) -> float:
        link = comm.group_link(cluster, size, stride)
        return 2 * comm.all_to_all_s(kv_bytes + q_o_bytes, size, link, fits)

    if kind == CP_ALL_GATHER:
        link = comm.group_link(cluster, cp, tp)
        ag = comm.all_gather_s(kv_bytes * cp, cp, link, fits)
        rs = comm.reduce_scatter_s(kv_bytes * cp, cp, link, fits)
        return 2 * ag + rs
    if kind == CP_A2A:
        return a2a(cp, tp)
    if kind == CP_A2A_P2P:
        inner, outer = attention.a2a_p2p_sizes(m, tp, cp)
        cost = a2a(inner, tp) if inner > 1 else 0.0
        return cost + (ring(outer, tp * inner, ring_kv_bytes * inner) if outer > 1 else 0.0)
    return ring(cp, tp, ring_kv_bytes)


def _block_ep_s(m: TransformerSpec, cluster, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry, fits) -> float:
    """Expert communication of an MoE block, forward + backward: the dispatch and combine
    all-to-alls over the EP group and the expert-TP gather / reduce-scatter (moe.ep_comm_fwd_s,
    Megatron-Core MoEAlltoAllTokenDispatcher), the backward moving the same volumes; not
    overlapped (Megatron's default)."""
    if not geo.moe_layer or (cfg.ep <= 1 and cfg.etp <= 1):
        return 0.0
    return 2 * moe.ep_comm_fwd_s(m, cluster, cfg, moe.layout(m, t, cfg), geo.act_dt, fits)


def _tp_split_params(m: TransformerSpec, params: float, tp: int) -> float:
    """One TP rank's share of a block's dense parameters: the TP-split ones / tp plus the
    ones every TP rank holds whole (attention.tp_replicated_params: MLA down projections,
    latent norms, QK-norm) and, in MoE blocks, the router (Megatron TopKRouter keeps its
    E x h weight whole on every rank)."""
    rep = _param_counts(m, False)[3]
    return (params - rep) / tp + rep


@lru_cache(maxsize=256)
def _param_counts(m: TransformerSpec, moe_layer: bool) -> tuple[float, float, float, float]:
    """(block params, block params without routed experts, one routed expert's params, TP-
    replicated attention params) of one block kind: pure functions of the model, cached
    because the planner builds thousands of tables of one model."""
    if not moe_layer:
        return flops.block_params(m, False), 0.0, 0.0, attention.tp_replicated_params(m)
    all_but_routed = flops.block_params(m, True, experts=0)
    routed_each = flops.block_params(m, True, experts=1) - all_but_routed
    return 0.0, all_but_routed, routed_each, attention.tp_replicated_params(m)


def _block_params(m: TransformerSpec, cfg: ParallelConfig, moe_layer: bool) -> tuple[float, float]:
    """(dense, expert) parameters of one block on one GPU: TP splits the dense part (less
    what every TP rank replicates), the routed experts are split num_experts/ep per EP rank
    and each expert's matrices over etp (MoE parallel folding); shared experts are dense
    (TP-split)."""
    if not moe_layer:
        return _tp_split_params(m, _param_counts(m, False)[0], cfg.tp), 0.0
    e = m.moe
    local_experts = max(1, e.num_experts // cfg.ep)
    _, all_but_routed, routed_each, _ = _param_counts(m, True)
    router = m.hidden_size * e.num_experts + (e.num_experts if e.router_bias else 0)
    dense = _tp_split_params(m, all_but_routed - router, cfg.tp) + router
    return dense, routed_each * local_experts / cfg.etp


@dataclass(frozen=True)
class _BlockStates:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    dp_sync_s: float
    zero3_comm_s: float
    optimizer_s: float


def _block_states(cluster, t: TrainingSpec, cfg: ParallelConfig, dense: float, expert: float,
                  c: _BlockCompute, fits) -> _BlockStates:
    """Model states, gradient sync, ZeRO-3 traffic and optimizer step of a block's dense
    parameters (data-parallel over dp*cp, TP ranks apart) and expert parameters (over
    tp*cp*dp/(ep*etp), etp*ep ranks apart: MoE parallel folding). The expert gathers are not
    hidden under compute (their layer's compute is counted once, with the dense part). The
    gathered ZeRO-3 parameters are the block's working set (memory.block_working_set_bytes).
    Under fp8 training a block's weights feed FP8 GEMMs and carry their FP8 copy
    (memory.fp8_weight_bytes; engines.state_bytes_per_param); the few norm and router weights
    among them are counted alike (under 0.1% of a block's parameters)."""
    tp, estride = cfg.tp, _expert_dp_stride(cfg)
    dp_size, edp_size = _dense_dp_size(cfg), _expert_dp_size(cfg)
    f8 = memory.fp8_weight_bytes(cluster.gpu, t, cfg.engine)
    w1, g1, o1 = _state(t, cfg, dense, dp_size, f8)
    w2, g2, o2 = _state(t, cfg, expert, edp_size, f8)
    dp_sync = _dp_sync_s(cluster, t, cfg, dense, dp_size, tp, fits)
    dp_sync += _dp_sync_s(cluster, t, cfg, expert, edp_size, estride, fits)
    zero3 = _zero3_s(cluster, t, cfg, dense, dp_size, tp, c.fwd_s, c.bwd_s, fits)
    zero3 += _zero3_s(cluster, t, cfg, expert, edp_size, estride, 0.0, 0.0, fits) if expert else 0.0
    opt = _optimizer_s(cluster, t, cfg, dense, dp_size) + _optimizer_s(cluster, t, cfg, expert, edp_size)
    opt += _dp_exposed_s(cluster, t, cfg, [(dense, dp_size, tp), (expert, edp_size, estride)], fits)
    return _BlockStates(w1 + w2, g1 + g2, o1 + o2, dp_sync, zero3, opt)


def _block_cost(
    m: TransformerSpec,
    cluster: ClusterSpec,
    t: TrainingSpec,
    cfg: ParallelConfig,
    index: int,
    profile: CalibrationProfile | None,
    sources: dict[str, str],
) -> LayerCost:
    """One transformer block: compute, TP/CP/EP communication, states (the functions above).
    A fully recomputed block repeats its forward compute, its forward TP collectives and
    its forward all-to-alls (half of ep_comm); selective recompute (eager attention only)
    repeats the attention core (Korthikanti §5)."""
    geo = _geometry(m, t, cfg, index)
    fits = profile.comm if profile else None
    c = _block_compute(m, cluster.gpu, t, cfg, geo, profile)
    sources[KIND_MOE_BLOCK if geo.moe_layer else KIND_BLOCK] = c.source
    tp_fwd = _block_tp_fwd_s(m, cluster, cfg, geo, c, fits)
    tp_bwd = _block_tp_bwd_s(m, cluster, cfg, geo, c, fits)
    ep_comm = _block_ep_s(m, cluster, t, cfg, geo, fits)
    cp_comm = _block_cp_s(m, cluster, cfg, geo, c, fits)
    unpaired = _combined_saving_s(cluster, cfg, geo, c, tp_fwd, tp_bwd, cp_comm, ep_comm)
    host_fwd, host_bwd = _host_bound_excess_s(m, cluster.gpu, t, cfg, geo, c,
                                              tp_fwd + tp_bwd + cp_comm + ep_comm - unpaired)
    dense, expert = _block_params(m, cfg, geo.moe_layer)
    st = _block_states(cluster, t, cfg, dense, expert, c, fits)
    b = cfg.micro_batch_size
    load = moe.layout(m, t, cfg).imbalance if geo.moe_layer and m.moe is not None else 1.0
    act = memory.block_activation_bytes(m, t, b, cfg.tp, cfg.cp, cfg.sequence_parallel, geo.moe_layer, cfg.engine,
                                        expert_load=load)
    working_set = memory.block_working_set_bytes(m, t, cfg, geo.moe_layer, dense + expert)
    model_f = 3.0 * flops.block_flops(m, b * t.seq_length, t.seq_length, geo.moe_layer, index=index,
                                      causal=True).total / (cfg.tp * cfg.cp)
    return LayerCost(
        name=f"block{index}",
        compute_s=c.fwd_s + c.bwd_s + host_fwd + host_bwd,
        fwd_s=c.fwd_s + host_fwd,
        tp_comm_s=tp_fwd + tp_bwd,
        cp_comm_s=cp_comm,
        ep_comm_s=ep_comm - unpaired,
        zero3_comm_s=st.zero3_comm_s,
        recompute_full_s=c.fwd_s + host_fwd + tp_fwd + (ep_comm / 2),
        recompute_selective_s=c.core_fwd_s if t.attention == ATTENTION_EAGER else 0.0,
        act=act,
        weights_bytes=st.weights_bytes,
        grads_bytes=st.grads_bytes,
        optimizer_bytes=st.optimizer_bytes,
        dp_sync_s=st.dp_sync_s,
        optimizer_s=st.optimizer_s,
        flops_model=model_f,
        transient_bytes=working_set,
        ep_unpaired_s=unpaired,
        host_wait_s=host_fwd + host_bwd,
    )


def _host_bound_excess_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: _BlockGeometry,
                         c: _BlockCompute, comm_s: float) -> tuple[float, float]:
    """(forward, backward) seconds an MoE layer waits on the host beyond its device time, for
    one micro-batch: the host's issue of the layer's kernels (moe.host_issue_s) less the
    device's compute and its exposed collectives (on the stream, they also keep the GPU
    busy while the CPU issues), split between the passes as the host's issue is. Zero for
    dense blocks, engines
    whose dispatcher does not synchronise with the host (kernels.EngineKernels.moe_host_sync)
    and profiled blocks (measured: their time holds the host's already), and with the
    experts' inputs padded to the capacity (training.moe_pad_to_capacity: Megatron-Core's
    alltoall dispatcher then knows every split in advance and makes no device-to-host copy,
    token_dispatcher.py preprocess, drop_and_pad, megatron-core 0.16.1)."""
    if not (geo.moe_layer and geo.kernels.moe_host_sync and c.source != "profile" and gpu.host_op_s > 0):
        return 0.0, 0.0
    if moe.padded_to_capacity(t):
        return 0.0, 0.0
    fwd, bwd = moe.host_issue_s(m, gpu, cfg, moe.layout(m, t, cfg), _quantize_kernels(gpu, t, cfg, geo))
    excess = fwd + bwd - (c.fwd_s + c.bwd_s + comm_s)
    if excess <= 0:
        return 0.0, 0.0
    return excess * fwd / (fwd + bwd), excess * bwd / (fwd + bwd)


def _combined_saving_s(cluster, cfg: ParallelConfig, geo: _BlockGeometry, c: _BlockCompute, tp_fwd: float,
                       tp_bwd: float, cp: float, ep_comm: float) -> float:
    """What the overlapped 1F1B all-to-all (cfg.moe_a2a_overlap, Megatron-Core
    --overlap-moe-expert-parallel-comm) saves on an MoE block's forward + backward when both
    run combined with another micro-batch's (moe.combined_saving_s; 0 otherwise). The nodes:
    mlp = the routed experts' GEMMs, forward c.experts_s, backward twice it (input and weight
    gradients, one GEMM each per forward one: Narayanan et al. SC'21 §5.1); attn = the rest
    of the block's compute with its TP and CP collectives (on the compute stream), its
    weight-gradient part the attention projections' forward time; dispatch and combine =
    half the all-to-all communication each way (moe.ep_comm_fwd_s: the two all-to-alls move
    the same bytes)."""
    if not (cfg.moe_a2a_overlap and geo.moe_layer and cfg.ep > 1 and ep_comm > 0):
        return 0.0
    share = c.fwd_s / (c.fwd_s + c.bwd_s) if c.fwd_s + c.bwd_s > 0 else 0.5
    experts = c.experts_s
    a2a = ep_comm / 4  # one all-to-all (with its expert-TP collective) of one direction
    fwd = moe.PassParts(attn=c.fwd_s - experts + tp_fwd + share * cp, mlp=experts, dispatch=a2a, combine=a2a)
    attn_w = c.qkv_s + c.out_s
    bwd = moe.PassParts(attn=max(0.0, c.bwd_s - 2 * experts - attn_w) + tp_bwd + (1 - share) * cp, mlp=experts,
                        dispatch=a2a, combine=a2a, attn_wgrad=attn_w, mlp_wgrad=experts)
    return moe.combined_saving_s(fwd, bwd, cluster.gpu.overlap_interference)


def _profiled(profile, kind: str, cfg: ParallelConfig, t: TrainingSpec, fwd: float, bwd: float):
    """(fwd, bwd, source) of a layer: a profiled (kind, tp, micro-batch, seq/cp) entry
    replaces the analytic fwd/bwd ("profile"); without one, the profile's rows of that kind
    scale it by their measured / analytic ratio (layer_table's `layer_scale`, "profile-fit")."""
    timing = profile.layers.get((kind, cfg.tp, cfg.micro_batch_size, t.seq_length // cfg.cp)) if profile else None
    if timing is not None:
        return timing.fwd_s, timing.bwd_s, "profile"
    scale = profile.layer_scale.get(kind) if profile else None
    return (fwd * scale[0], bwd * scale[1], "profile-fit") if scale else (fwd, bwd, "analytic")


def _replicated_layer(
    name: str, cluster, t, cfg, params: float, fwd: float, bwd: float, tp_comm: float,
    act: memory.ActivationBytes, flops_model: float, fits, recompute_full_s: float = 0.0, tail_s: float = 0.0,
    transient_bytes: float = 0.0,
) -> LayerCost:
    """A layer whose `params` (per TP rank) are replicated over the dense data-parallel group:
    its model states, ZeRO-3 gathers, gradient sync and optimizer step."""
    dp, tp = _dense_dp_size(cfg), cfg.tp
    w, g, o = _state(t, cfg, params, dp)
    sync = _dp_sync_s(cluster, t, cfg, params, dp, tp, fits)
    return LayerCost(
        name=name,
        compute_s=fwd + bwd,
        fwd_s=fwd,
        tp_comm_s=tp_comm,
        cp_comm_s=0.0,
        ep_comm_s=0.0,
        zero3_comm_s=_zero3_s(cluster, t, cfg, params, dp, tp, fwd, bwd, fits),
        recompute_full_s=recompute_full_s,
        recompute_selective_s=0.0,
        act=act,
        weights_bytes=w,
        grads_bytes=g,
        optimizer_bytes=o,
        dp_sync_s=sync,
        optimizer_s=_optimizer_s(cluster, t, cfg, params, dp) + _dp_exposed_s(cluster, t, cfg, [(params, dp, tp)], fits)
        + tail_s,
        flops_model=flops_model,
        transient_bytes=transient_bytes,
    )


@lru_cache(maxsize=64)
def _total_params(m: TransformerSpec) -> float:
    """flops.total_params, once per model (a search builds thousands of tables)."""
    return flops.total_params(m)


def _embedding_cost(m: TransformerSpec, cluster, t, cfg, profile, sources) -> LayerCost:
    """Vocab-parallel embedding lookup (Megatron): gather rows, all-reduce the partial
    outputs over TP (reduce-scatter with SP); backward scatter-adds into the gradient."""
    gpu, tp, b = cluster.gpu, cfg.tp, cfg.micro_batch_size
    act_dt = memory.activation_dtype_bytes(t)
    tokens = b * t.seq_length / cfg.cp
    nbytes = 2 * act_dt * tokens * m.hidden_size
    fwd = compute.memory_bound_time_s(gpu, nbytes, kernels=2)
    bwd = compute.memory_bound_time_s(gpu, 2 * nbytes, kernels=2)
    fwd, bwd, sources[KIND_EMBEDDING] = _profiled(profile, KIND_EMBEDDING, cfg, t, fwd, bwd)
    fits = profile.comm if profile else None
    tp_comm = 2 * _tp_sync_s(act_dt * tokens * m.hidden_size, tp, comm.group_link(cluster, tp, 1), fits,
                             cfg.sequence_parallel)
    act = memory.embedding_activation_bytes(m, t, b, tp, cfg.cp, cfg.sequence_parallel)
    params_rank = _total_params(m) / tp  # at least one bucket's worth on the first stage
    return _replicated_layer(
        KIND_EMBEDDING, cluster, t, cfg, flops.embedding_params(m) / tp, fwd, bwd, tp_comm,
        memory.ActivationBytes(act, act, act), 0.0, fits,
        tail_s=_dp_last_bucket_s(cluster, t, cfg, params_rank, fits) + _expert_last_bucket_s(m, cluster, t, cfg, fits),
    )


def _output_cost(m: TransformerSpec, cluster, t, cfg, profile, sources) -> LayerCost:
    """Final norm, vocab-parallel logits GEMM and fp32 cross-entropy (Megatron
    vocab_parallel_cross_entropy: 3 small all-reduces of per-token scalars). FP8 recipes
    leave the output layer in bf16 (Megatron-Core builds it outside the TE fp8 region;
    torchtitan's Float8 converter filters `output` out)."""
    gpu, tp, b = cluster.gpu, cfg.tp, cfg.micro_batch_size
    dt = _attention_dtype(t)
    act_dt = memory.activation_dtype_bytes(t)
    tokens = b * t.seq_length / cfg.cp
    v_local = m.vocab_size / tp
    gemm = compute.gemm_time_s(gpu, dt, tokens, v_local, m.hidden_size)
    # final norm: replicated over TP ranks unless sequence-parallel
    norm = compute.memory_bound_time_s(gpu, 2 * act_dt * tokens * m.hidden_size / (tp if cfg.sequence_parallel else 1), kernels=1)
    ce = compute.memory_bound_time_s(gpu, tokens * v_local * (act_dt + 3 * 4), kernels=4)  # upcast, max, exp-sum, grad
    fwd = gemm + norm + ce
    bwd = 2 * gemm + 2 * norm + ce
    fwd, bwd, sources["output"] = _profiled(profile, KIND_LOGITS, cfg, t, fwd, bwd)
    fits = profile.comm if profile else None
    link = comm.group_link(cluster, tp, 1)
    tp_comm = 3 * comm.all_reduce_s(4 * tokens, tp, link, fits)
    tp_comm += 2 * _tp_sync_s(act_dt * tokens * m.hidden_size, tp, link, fits, cfg.sequence_parallel)  # f/g
    act = memory.logits_activation_bytes(m, t, b, tp, cfg.cp, cfg.sequence_parallel, cfg.engine)
    params = flops.output_params(m) / tp
    return _replicated_layer(
        "output", cluster, t, cfg, params, fwd, bwd, tp_comm,
        memory.ActivationBytes(act, act, act), 3.0 * flops.logits_flops(m, b * t.seq_length) / (tp * cfg.cp), fits,
        transient_bytes=memory.loss_transient_bytes(m, t, cfg, params),
    )


def _with_mtp(m: TransformerSpec, cluster, t: TrainingSpec, cfg: ParallelConfig, output: LayerCost,
              last_block: LayerCost) -> LayerCost:
    """Multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core multi_token_prediction.py puts
    the MTP modules after the decoder on the last pipeline stage): per module one block
    shaped like the last one (its cost, states and activations), the h x 2h projection of
    [norm(h); norm(emb)] (TP-split, its states over the dense DP group) and one more pass
    through the shared output head (the output layer's time and activations; its weights are
    the main head's). Model FLOPs: 3 x flops.mtp_flops / (tp*cp). Not recomputed."""
    n = m.num_nextn_predict_layers
    gpu, dt, h = cluster.gpu, t.dtype, m.hidden_size
    tokens = cfg.micro_batch_size * t.seq_length / cfg.cp
    proj_fwd = compute.gemm_time_s(gpu, dt, tokens, h / cfg.tp, 2 * h)
    proj_params = 2 * h * h / cfg.tp
    dp = _dense_dp_size(cfg)
    w, g, o = _state(t, cfg, proj_params, dp)
    fits = None
    blk, out = last_block, output
    act = blk.act.none + out.act.none
    return LayerCost(
        name=f"{output.name}+mtp{n}",
        compute_s=out.compute_s + n * (blk.compute_s + out.compute_s + 3 * proj_fwd),
        fwd_s=out.fwd_s + n * (blk.fwd_s + out.fwd_s + proj_fwd),
        tp_comm_s=out.tp_comm_s + n * (blk.tp_comm_s + out.tp_comm_s),
        cp_comm_s=out.cp_comm_s + n * blk.cp_comm_s,
        ep_comm_s=out.ep_comm_s + n * blk.ep_comm_s,
        zero3_comm_s=out.zero3_comm_s + n * blk.zero3_comm_s,
        recompute_full_s=out.recompute_full_s,
        recompute_selective_s=out.recompute_selective_s,
        act=memory.ActivationBytes(out.act.none + n * act, out.act.selective + n * act, out.act.full + n * act),
        weights_bytes=out.weights_bytes + n * (blk.weights_bytes + w),
        grads_bytes=out.grads_bytes + n * (blk.grads_bytes + g),
        optimizer_bytes=out.optimizer_bytes + n * (blk.optimizer_bytes + o),
        dp_sync_s=out.dp_sync_s + n * (blk.dp_sync_s + _dp_sync_s(cluster, t, cfg, proj_params, dp, cfg.tp, fits)),
        optimizer_s=out.optimizer_s + n * (blk.optimizer_s + _optimizer_s(cluster, t, cfg, proj_params, dp)),
        flops_model=out.flops_model + 3.0 * flops.mtp_flops(m, cfg.micro_batch_size * t.seq_length, t.seq_length)
        / (cfg.tp * cfg.cp),
        transient_bytes=max(out.transient_bytes, blk.transient_bytes),
    )


def _p2p_s(m_hidden: float, cluster, t, cfg, profile) -> float:
    """Activation send between adjacent pipeline ranks (tp*cp*dp ranks apart). With SP (or
    Narayanan §4.1's scatter/gather optimisation) each TP rank sends 1/t of it."""
    if cfg.pp <= 1:
        return 0.0
    act_dt = memory.activation_dtype_bytes(t)
    nbytes = act_dt * cfg.micro_batch_size * t.seq_length / cfg.cp * m_hidden / cfg.tp
    stride = cfg.tp * cfg.cp * cfg.dp
    link = comm.group_link(cluster, 2, stride)
    # Megatron's interleaved schedule overlaps these sends with compute (overlap_p2p_comm);
    # the layer table is shared by every (pp, vpp) of a search, so that overlap belongs to
    # the pipeline composition (stages.py), which does not price it yet: charged in full.
    return comm.send_recv_s(nbytes, link, profile.comm if profile else None)


# --------------------------------------------------------------------------- generic layers


def _generic_cost(layer, cluster, t, cfg, profile, index) -> LayerCost:
    """A user-described layer: its forward FLOPs run at the GEMM efficiency of a square
    GEMM with the layer's hidden width (sqrt(params) as the width proxy); backward = 2x;
    TP divides FLOPs, params and activations and costs 2 all-reduces of its output forward
    and 2 backward, as a Megatron block."""
    gpu, tp, b = cluster.gpu, cfg.tp, cfg.micro_batch_size
    seqs = b / cfg.cp
    width = max(1.0, layer.params ** 0.5)
    tokens = seqs * t.seq_length
    eta = compute.gemm_efficiency(gpu, tokens, width / tp, width)
    fwd = layer.fwd_flops * seqs / tp / (compute.peak_flops(gpu, t.dtype) * eta) + gpu.kernel_overhead_s
    fits = profile.comm if profile else None
    tp_fwd = 2 * comm.all_reduce_s(layer.output_bytes * seqs, tp, comm.group_link(cluster, tp, 1), fits)
    act_none = layer.activation_bytes * seqs / tp
    act_full = layer.output_bytes * seqs / (tp if cfg.sequence_parallel else 1)
    return _replicated_layer(
        layer.name or f"layer{index}", cluster, t, cfg, layer.params / tp, fwd, 2 * fwd, 2 * tp_fwd,
        memory.ActivationBytes(act_none, act_none, min(act_none, act_full)), 3 * layer.fwd_flops * b, fits,
        recompute_full_s=fwd + tp_fwd,
    )


def _empty(name: str) -> LayerCost:
    return LayerCost(name, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, _ZERO_ACT, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- entry point


def layer_table(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    cfg: ParallelConfig,
    profile: CalibrationProfile | None = None,
) -> LayerTable:
    """Per-layer costs under cfg's tp/cp/ep/dp/sp/zero/micro-batch (pp, stage boundaries and
    recompute choices are applied later, in stages.py)."""
    cluster, fitted = _calibrated(cluster, training, profile)
    if profile is not None and profile.layers and isinstance(model, TransformerSpec):
        profile = dataclasses.replace(profile, layer_scale=_layer_scales(model, cluster, training, profile))
    table = _layer_table(model, cluster, training, cfg, profile)
    if fitted:  # what no exact profile row replaced ran on the profile-fitted constants
        table.sources.update({k: "profile-fit" for k, v in table.sources.items() if v == "analytic" and k != "comm"})
    return table


def _calibrated(cluster: ClusterSpec, training: TrainingSpec, profile: CalibrationProfile | None):
    """(cluster, fitted?): a profile of this device replaces the catalog's efficiency
    constants with the ones fitted from it (cost_model.hardware.calibration)."""
    gpu = calibration.calibrated_gpu(cluster.gpu, profile, training.dtype) if profile is not None else None
    return (cluster, False) if gpu is None else (dataclasses.replace(cluster, gpu=gpu), True)


_SCALE_KINDS = {KIND_BLOCK: False, KIND_MOE_BLOCK: True}  # kind -> is an MoE block
_SCALE_CACHE: dict[tuple, tuple] = {}
_SCALE_CACHE_SIZE = 16
SCALE_RANGE = (0.1, 10.0)  # bounds of a layer kind's measured / analytic ratio


def _layer_scales(model: TransformerSpec, cluster: ClusterSpec, training: TrainingSpec,
                  profile: CalibrationProfile) -> dict[str, tuple[float, float]]:
    """Per layer kind, the least-squares ratio (in log space: the geometric mean) of the
    profile's measured fwd and bwd to the analytic model's on the calibrated device at the
    same (tp, micro-batch, seq): what the analytic structure misses (framework ops it does
    not count, fusion it assumes), carried to shapes the profile did not measure. The rows
    describe the model being priced, as the exact-match lookup already assumes."""
    key = (id(profile), id(model), id(cluster.gpu), training)
    hit = _SCALE_CACHE.get(key)
    if hit is not None and hit[0] is profile and hit[1] is model and hit[2] is cluster.gpu:
        return hit[3]
    logs: dict[str, list[tuple[float, float]]] = {}
    for (kind, tp, mb, seq), timing in profile.layers.items():
        moe = _SCALE_KINDS.get(kind)
        index = _first_block(model, moe) if moe is not None else 0
        if index is None or timing.fwd_s <= 0 or timing.bwd_s <= 0:
            continue
        cfg = ParallelConfig(tp=tp, micro_batch_size=mb)
        t = dataclasses.replace(training, seq_length=seq)
        if kind in _SCALE_KINDS:
            cost = _block_cost(model, cluster, t, cfg, index, None, {})
        elif kind == KIND_EMBEDDING:
            cost = _embedding_cost(model, cluster, t, cfg, None, {})
        else:
            cost = _output_cost(model, cluster, t, cfg, None, {})
        fwd, bwd = cost.fwd_s, cost.compute_s - cost.fwd_s
        if fwd > 0 and bwd > 0:
            logs.setdefault(kind, []).append((math.log(timing.fwd_s / fwd), math.log(timing.bwd_s / bwd)))
    lo, hi = SCALE_RANGE
    scales = {
        kind: tuple(min(hi, max(lo, math.exp(sum(v[i] for v in vals) / len(vals)))) for i in (0, 1))
        for kind, vals in logs.items()
    }
    if len(_SCALE_CACHE) >= _SCALE_CACHE_SIZE:
        _SCALE_CACHE.pop(next(iter(_SCALE_CACHE)))
    _SCALE_CACHE[key] = (profile, model, cluster.gpu, scales)
    return scales


def _first_block(model: TransformerSpec, moe: bool) -> int | None:
    """Index of the first MoE (or dense) block, None when the model has none."""
    return next((i for i, (is_moe, _) in enumerate(_block_keys(model)) if is_moe == moe), None)


@lru_cache(maxsize=64)
def _block_keys(model: TransformerSpec) -> tuple[tuple[bool, int | None], ...]:
    """Each block's kind: blocks differ by MoE-ness and by their attention window (sliding /
    chunked layers). A function of the model alone, read by every layer table of a search
    (thousands): computed once."""
    return tuple((model.moe is not None and model.moe.is_moe_layer(i), attention.window(model, i))
                 for i in range(model.num_layers))


@lru_cache(maxsize=64)
def _first_of_kind(model: TransformerSpec) -> tuple[tuple[int, tuple[bool, int | None]], ...]:
    """(index, kind) of the first block of each kind, in model order."""
    first: dict[tuple, int] = {}
    for i, key in enumerate(_block_keys(model)):
        first.setdefault(key, i)
    return tuple((i, key) for key, i in first.items())


def _layer_table(model, cluster, training, cfg, profile) -> LayerTable:
    sources: dict[str, str] = {}
    if isinstance(model, LayerListSpec):
        blocks = tuple(_generic_cost(layer, cluster, training, cfg, profile, i) for i, layer in enumerate(model.layers))
        hidden_bytes = max((layer.output_bytes for layer in model.layers), default=0.0)
        act_dt = memory.activation_dtype_bytes(training)
        sources[KIND_BLOCK] = "analytic"
        return LayerTable(
            blocks=blocks,
            embedding=_empty(KIND_EMBEDDING),
            output=_empty("output"),
            p2p_s=_p2p_s(hidden_bytes / (act_dt * training.seq_length), cluster, training, cfg, profile),
            sources=sources,
        )
    cache: dict[tuple, LayerCost] = {}
    for i, key in _first_of_kind(model):
        cache[key] = _block_cost(model, cluster, training, cfg, i, profile, sources)
    blocks = [cache[key] for key in _block_keys(model)]
    # collectives: measured alpha-beta fits (profiler.comm) or the catalog's link numbers
    sources["comm"] = "profile" if profile is not None and profile.comm else "analytic"
    output = _output_cost(model, cluster, training, cfg, profile, sources)
    if model.num_nextn_predict_layers > 0 and blocks:
        output = _with_mtp(model, cluster, training, cfg, output, blocks[-1])
    # the loss's share of the reserved peak beside the blocks' cached temporaries
    held = max(b.act.none for b in cache.values())
    output = replace(output, transient_bytes=memory.loss_reserved_bytes(
        model, training, cfg, output.transient_bytes, held))
    return LayerTable(
        blocks=tuple(blocks),
        embedding=_embedding_cost(model, cluster, training, cfg, profile, sources),
        output=output,
        p2p_s=_p2p_s(model.hidden_size, cluster, training, cfg, profile),
        sources=sources,
        combined_1f1b=cfg.moe_a2a_overlap,
    )
