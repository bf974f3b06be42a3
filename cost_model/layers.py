"""Per-layer cost table: what one block (and the embedding / output layer) costs one GPU for
one micro-batch under given degrees. The pipeline composition (stages.py), the estimate and
the planner's ILP all read this one table, so they agree by construction.

Times are per micro-batch. Communication inside a layer follows Megatron-LM:
- TP (Shoeybi et al. 2019 §3): 2 all-reduces of the b*s*h activations in forward and 2 in
  backward per block; with sequence parallelism (Korthikanti §4.2.2) each all-reduce
  becomes an all-gather + reduce-scatter of the same total volume. Not overlapped.
- CP (ring attention, Liu et al. 2023; Megatron-Core context parallel): cp-1 exchanges of
  the local K/V chunk forward, K/V + dK/dV backward, overlapped with the attention core:
  only the excess is exposed.
- EP (DeepSeek-V3 §3.2; Megatron-Core MoE): all-to-all dispatch + combine of the routed
  tokens forward and backward, not overlapped.
- ZeRO-3 (Rajbhandari et al. 2020 §5): parameters all-gathered before forward and before
  backward and gradients reduce-scattered after backward, every micro-batch, prefetched
  so that only the excess over the layer's compute is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from . import comm, compute, flops, memory
from .specs import (
    CalibrationProfile,
    ClusterSpec,
    LayerListSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)
from .vocab import DTYPE_BYTES

FLASH_BWD_FACTOR = 2.5  # FlashAttention-2 backward does 5 matmuls to forward's 2 (Dao 2023 §3.2)
FLASH_CAUSAL_FRACTION = 0.5  # causal masking skips the upper-triangle tiles


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
    transient_bytes: float = 0.0  # live only while the layer runs (ZeRO-3 gathered params)

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

    @cached_property
    def block_kinds(self) -> tuple[LayerCost, ...]:
        """The distinct block costs (blocks of one kind share one LayerCost object)."""
        return tuple({id(b): b for b in self.blocks}.values())

    @cached_property
    def block_act_peak_bytes(self) -> float:
        """A fully recomputed block's activations live again during its backward
        (Korthikanti §5): a rank that recomputes holds the largest block's, at most."""
        return max((b.act.none for b in self.blocks), default=0.0)

    @cached_property
    def zero3_buffer_bytes(self) -> float:
        """ZeRO-3 gathered parameters in flight (current + prefetched layer)."""
        return max((b.transient_bytes for b in (*self.blocks, self.embedding, self.output)), default=0.0)


_ZERO_ACT = memory.ActivationBytes(0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- helpers


def _dense_dp_size(cfg: ParallelConfig) -> int:
    """Megatron reduces dense gradients over the data x context-parallel ranks."""
    return cfg.dp * cfg.cp


def _expert_dp_size(cfg: ParallelConfig) -> int:
    """Expert weights are replicated over dp*cp/ep ranks (ep is carved out of dp x cp)."""
    return max(1, cfg.dp * cfg.cp // cfg.ep)


def _state(
    t: TrainingSpec, cfg: ParallelConfig, params: float, shard: int
) -> tuple[float, float, float]:
    per = memory.model_state_bytes_per_param(t, cfg.zero, shard)
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
    """Once-per-step gradient sync of `params` local parameters over a DP group.
    zero 0: all-reduce of gradients (grad dtype). zero 1/2 (distributed optimizer):
    reduce-scatter of gradients + all-gather of updated 16-bit parameters (Megatron
    distrib_optimizer.md; ZeRO §5.1-5.2: same 2*Psi volume as all-reduce).
    zero 3: per micro-batch, costed in `_zero3_s`."""
    if size <= 1 or cfg.zero >= 3:
        return 0.0
    link = comm.group_link(cluster, size, stride)
    gbytes = params * (DTYPE_BYTES[t.grad_dtype] if t.dtype != "fp32" else 4)
    if cfg.zero == 0:
        return comm.all_reduce_s(gbytes, size, link, fits)
    wbytes = params * DTYPE_BYTES[t.dtype]
    return comm.reduce_scatter_s(gbytes, size, link, fits) + comm.all_gather_s(wbytes, size, link, fits)


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
    """ZeRO-3 per micro-batch: all-gather 16-bit params for forward and for backward,
    reduce-scatter gradients; prefetch overlaps them with the layer's compute. Plus the
    buffer copies around them, which run on the compute stream and are not hidden: the
    gathered flat buffer is copied out into the layer's parameters after each gather, and
    the gradients into the flat reduce-scatter input (torch FSDP2, fully_shard
    _fsdp_collectives.py: foreach_all_gather_copy_out, foreach_reduce; DeepSpeed ZeRO-3
    flattens and copies likewise): one read and one write of 2 W + G bytes."""
    if size <= 1 or cfg.zero < 3:
        return 0.0
    link = comm.group_link(cluster, size, stride)
    wbytes = params * DTYPE_BYTES[t.dtype]
    gbytes = params * DTYPE_BYTES[t.dtype]  # reduced in 16-bit then accumulated into fp32 shards
    fwd = comm.all_gather_s(wbytes, size, link, fits)
    bwd = comm.all_gather_s(wbytes, size, link, fits) + comm.reduce_scatter_s(gbytes, size, link, fits)
    gamma = cluster.gpu.overlap_interference
    copies = compute.memory_bound_time_s(cluster.gpu, 2 * (2 * wbytes + gbytes), kernels=3)
    return overlapped_s(fwd, fwd_compute_s, gamma) + overlapped_s(bwd, bwd_compute_s, gamma) + copies


def overlapped_s(comm_s: float, compute_s: float, interference: float) -> float:
    """Exposed time of `comm_s` run alongside `compute_s`: the excess over the compute plus
    `interference` x the hidden part (= max(comm - (1-g) compute, g comm), convex)."""
    return max(0.0, comm_s - compute_s) + interference * min(comm_s, compute_s)


def _optimizer_s(cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig, params: float, shard: int) -> float:
    """Optimizer step is memory-bound: each owned parameter reads and writes its optimizer
    states, reads its gradient and writes its 16-bit copy (Adam: fused multi-tensor apply)."""
    owned = params / (shard if cfg.zero >= 1 else 1)
    k = memory.optimizer_bytes_per_param(t)
    g = DTYPE_BYTES[t.grad_dtype] if t.dtype != "fp32" else 4
    nbytes = owned * (2 * k + g + DTYPE_BYTES[t.dtype])
    return compute.memory_bound_time_s(cluster.gpu, nbytes, kernels=1)


# --------------------------------------------------------------------------- transformer


def _block_cost(
    m: TransformerSpec,
    cluster: ClusterSpec,
    t: TrainingSpec,
    cfg: ParallelConfig,
    index: int,
    profile: CalibrationProfile | None,
    sources: dict[str, str],
) -> LayerCost:
    gpu = cluster.gpu
    dt = t.dtype if t.dtype != "fp8" else "fp8"
    act_dt = DTYPE_BYTES[t.dtype] if t.dtype != "fp8" else 2
    moe_layer = m.moe is not None and m.moe.is_moe_layer(index)
    tp, cp, b = cfg.tp, cfg.cp, cfg.micro_batch_size
    s_local = t.seq_length / cp
    tokens = b * s_local  # tokens this GPU processes (all TP ranks see all tokens)
    h, d = m.hidden_size, m.kv_channels
    a, g = m.num_attention_heads, m.num_kv_heads
    rep = tp if cfg.sequence_parallel else 1  # without SP every TP rank repeats the elementwise work

    # --- GEMMs (forward), per TP shard
    gemm_s = compute.gemm_time_s(gpu, dt, tokens, (a * d + 2 * g * d) / tp, h)  # QKV
    gemm_s += compute.gemm_time_s(gpu, dt, tokens, h, a * d / tp)  # output projection
    if moe_layer:
        e = m.moe
        n_local = max(1, e.num_experts // cfg.ep)
        tok_per_expert = tokens * e.top_k * cfg.ep / e.num_experts  # balanced routing
        f = e.ffn_hidden_size
        n_up = 2 if m.mlp == "swiglu" else 1
        gemm_s += compute.gemm_time_s(gpu, dt, tok_per_expert, n_up * f / tp, h, batch=n_local)
        gemm_s += compute.gemm_time_s(gpu, dt, tok_per_expert, h, f / tp, batch=n_local)
        if e.num_shared_experts:
            fs = f * e.num_shared_experts
            gemm_s += compute.gemm_time_s(gpu, dt, tokens, n_up * fs / tp, h)
            gemm_s += compute.gemm_time_s(gpu, dt, tokens, h, fs / tp)
        gemm_s += compute.gemm_time_s(gpu, dt, tokens, e.num_experts, h)  # router
        f_elem = f * (e.top_k * 1.0)
    else:
        f = m.ffn_hidden_size
        n_up = 2 if m.mlp == "swiglu" else 1
        gemm_s += compute.gemm_time_s(gpu, dt, tokens, n_up * f / tp, h)
        gemm_s += compute.gemm_time_s(gpu, dt, tokens, h, f / tp)
        f_elem = f

    # --- attention core (forward)
    heads_local = a / tp
    if t.attention == "eager":
        # materialised scores: QK^T and PV as batched GEMMs over b * heads, full s x s
        core_s = compute.gemm_time_s(gpu, dt, s_local, t.seq_length, d, batch=b * heads_local)
        core_s += compute.gemm_time_s(gpu, dt, s_local, d, t.seq_length, batch=b * heads_local)
        scores = b * heads_local * s_local * t.seq_length
        mask = 1 if m.dropout else 0
        # scale-mask-softmax (read+write) and dropout (read, write, mask)
        core_s += compute.memory_bound_time_s(gpu, scores * (2 * act_dt + (2 * act_dt + mask) * mask), kernels=2)
        core_bwd_s = 2.0 * core_s
    else:
        core_flops = flops.attention_core_flops(m, tokens, t.seq_length) / tp * FLASH_CAUSAL_FRACTION
        core_s = compute.flash_attention_time_s(gpu, dt, core_flops)
        core_bwd_s = FLASH_BWD_FACTOR * core_s

    # --- memory-bound elementwise work (forward), bytes through HBM
    sbh_bytes = act_dt * tokens * h / rep
    elem = 2 * 2 * sbh_bytes  # two norms, read + write
    elem += 2 * 3 * sbh_bytes  # two residual adds (+ dropout), read 2 write 1
    if m.dropout:
        elem += 2 * tokens * h / rep  # masks
    if m.position == "rope":
        elem += 2 * act_dt * tokens * (a + g) * d / tp  # rotate q and k
    act_reads = 3 if m.mlp == "swiglu" else 2  # swiglu reads gate+up, writes one
    elem += act_reads * act_dt * tokens * f_elem / tp
    elem_s = compute.memory_bound_time_s(gpu, elem, kernels=8)

    fwd_compute = gemm_s + core_s + elem_s
    bwd_compute = 2.0 * (gemm_s + elem_s) + core_bwd_s
    source = "analytic"
    if profile is not None:
        kind = "moe_block" if moe_layer else "block"
        timing = profile.layers.get((kind, tp, b, t.seq_length // cp))
        if timing is not None:
            fwd_compute, bwd_compute = timing.fwd_s, timing.bwd_s
            core_s = core_s * (timing.fwd_s / max(1e-12, gemm_s + core_s + elem_s))
            source = "profile"
    sources["moe_block" if moe_layer else "block"] = source

    # --- TP communication: 4 all-reduce-equivalents of b*s*h per block (fwd 2, bwd 2)
    fits = profile.comm if profile else None
    tp_link = comm.group_link(cluster, tp, 1)
    ar_bytes = act_dt * tokens * h
    tp_fwd = 2 * _tp_sync_s(ar_bytes, tp, tp_link, fits, cfg.sequence_parallel)
    tp_comm = 2 * tp_fwd

    # --- CP ring exchange of K/V, overlapped with the attention core
    cp_comm = 0.0
    if cp > 1:
        cp_link = comm.group_link(cluster, cp, tp)
        kv_bytes = 2 * act_dt * tokens * g * d / tp
        ring_fwd = (cp - 1) * comm.send_recv_s(kv_bytes, cp_link, fits)
        gamma = gpu.overlap_interference
        cp_comm = overlapped_s(ring_fwd, core_s, gamma) + overlapped_s(2 * ring_fwd, core_bwd_s, gamma)

    # --- EP all-to-all dispatch + combine, forward and backward
    ep_comm = 0.0
    if moe_layer and cfg.ep > 1:
        ep_link = comm.group_link(cluster, cfg.ep, tp * cp)
        a2a_bytes = act_dt * tokens * m.moe.top_k * h / (tp if cfg.sequence_parallel else 1)
        ep_comm = 4 * comm.all_to_all_s(a2a_bytes, cfg.ep, ep_link, fits)

    # --- parameters and model states
    dense_params = flops.block_params(m, False) if not moe_layer else 0.0
    expert_params = 0.0
    if moe_layer:
        e = m.moe
        local_experts = max(1, e.num_experts // cfg.ep)
        all_but_routed = flops.block_params(m, True, experts=0)
        routed_each = flops.block_params(m, True, experts=1) - all_but_routed
        dense_params = all_but_routed
        expert_params = routed_each * local_experts
    dense_params /= tp
    expert_params /= tp
    dp_size, edp_size = _dense_dp_size(cfg), _expert_dp_size(cfg)
    w1, g1, o1 = _state(t, cfg, dense_params, dp_size)
    w2, g2, o2 = _state(t, cfg, expert_params, edp_size)
    dp_sync = _dp_sync_s(cluster, t, cfg, dense_params, dp_size, tp, fits)
    dp_sync += _dp_sync_s(cluster, t, cfg, expert_params, edp_size, tp * cfg.ep, fits)
    zero3 = _zero3_s(cluster, t, cfg, dense_params, dp_size, tp, fwd_compute, bwd_compute, fits)
    zero3 += _zero3_s(cluster, t, cfg, expert_params, edp_size, tp * cfg.ep, 0.0, 0.0, fits) if expert_params else 0.0
    opt = _optimizer_s(cluster, t, cfg, dense_params, dp_size) + _optimizer_s(cluster, t, cfg, expert_params, edp_size)
    transient = (dense_params + expert_params) * DTYPE_BYTES[t.dtype] * 2 if cfg.zero >= 3 else 0.0

    act = memory.block_activation_bytes(m, t, b, tp, cp, cfg.sequence_parallel, moe_layer)
    model_f = 3.0 * flops.block_flops(m, b * t.seq_length, t.seq_length, moe_layer).total / (tp * cp)
    selective_s = core_s if t.attention == "eager" else 0.0
    return LayerCost(
        name=f"block{index}",
        compute_s=fwd_compute + bwd_compute,
        fwd_s=fwd_compute,
        tp_comm_s=tp_comm,
        cp_comm_s=cp_comm,
        ep_comm_s=ep_comm,
        zero3_comm_s=zero3,
        recompute_full_s=fwd_compute + tp_fwd + (ep_comm / 2),
        recompute_selective_s=selective_s,
        act=act,
        weights_bytes=w1 + w2,
        grads_bytes=g1 + g2,
        optimizer_bytes=o1 + o2,
        dp_sync_s=dp_sync,
        optimizer_s=opt,
        flops_model=model_f,
        transient_bytes=transient,
    )


def _profiled(profile, kind: str, cfg: ParallelConfig, t: TrainingSpec, fwd: float, bwd: float):
    """A profiled (kind, tp, micro-batch, seq/cp) entry replaces the analytic fwd/bwd."""
    timing = profile.layers.get((kind, cfg.tp, cfg.micro_batch_size, t.seq_length // cfg.cp)) if profile else None
    return (timing.fwd_s, timing.bwd_s, "profile") if timing else (fwd, bwd, "analytic")


def _replicated_layer(
    name: str, cluster, t, cfg, params: float, fwd: float, bwd: float, tp_comm: float,
    act: memory.ActivationBytes, flops_model: float, fits, recompute_full_s: float = 0.0,
) -> LayerCost:
    """A layer whose `params` (per TP rank) are replicated over the dense data-parallel group:
    its model states, ZeRO-3 gathers, gradient sync and optimizer step."""
    dp, tp = _dense_dp_size(cfg), cfg.tp
    w, g, o = _state(t, cfg, params, dp)
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
        dp_sync_s=_dp_sync_s(cluster, t, cfg, params, dp, tp, fits),
        optimizer_s=_optimizer_s(cluster, t, cfg, params, dp),
        flops_model=flops_model,
    )


def _embedding_cost(m: TransformerSpec, cluster, t, cfg, profile, sources) -> LayerCost:
    """Vocab-parallel embedding lookup (Megatron): gather rows, all-reduce the partial
    outputs over TP (reduce-scatter with SP); backward scatter-adds into the gradient."""
    gpu, tp, b = cluster.gpu, cfg.tp, cfg.micro_batch_size
    act_dt = DTYPE_BYTES[t.dtype] if t.dtype != "fp8" else 2
    tokens = b * t.seq_length / cfg.cp
    nbytes = 2 * act_dt * tokens * m.hidden_size
    fwd = compute.memory_bound_time_s(gpu, nbytes, kernels=2)
    bwd = compute.memory_bound_time_s(gpu, 2 * nbytes, kernels=2)
    fwd, bwd, sources["embedding"] = _profiled(profile, "embedding", cfg, t, fwd, bwd)
    fits = profile.comm if profile else None
    tp_comm = 2 * _tp_sync_s(act_dt * tokens * m.hidden_size, tp, comm.group_link(cluster, tp, 1), fits,
                             cfg.sequence_parallel)
    act = memory.embedding_activation_bytes(m, t, b, tp, cfg.cp, cfg.sequence_parallel)
    return _replicated_layer(
        "embedding", cluster, t, cfg, flops.embedding_params(m) / tp, fwd, bwd, tp_comm,
        memory.ActivationBytes(act, act, act), 0.0, fits,
    )


def _output_cost(m: TransformerSpec, cluster, t, cfg, profile, sources) -> LayerCost:
    """Final norm, vocab-parallel logits GEMM and fp32 cross-entropy (Megatron
    vocab_parallel_cross_entropy: 3 small all-reduces of per-token scalars)."""
    gpu, tp, b = cluster.gpu, cfg.tp, cfg.micro_batch_size
    dt = t.dtype
    act_dt = DTYPE_BYTES[t.dtype] if t.dtype != "fp8" else 2
    tokens = b * t.seq_length / cfg.cp
    v_local = m.vocab_size / tp
    gemm = compute.gemm_time_s(gpu, dt, tokens, v_local, m.hidden_size)
    # final norm: replicated over TP ranks unless sequence-parallel
    norm = compute.memory_bound_time_s(gpu, 2 * act_dt * tokens * m.hidden_size / (tp if cfg.sequence_parallel else 1), kernels=1)
    ce = compute.memory_bound_time_s(gpu, tokens * v_local * (act_dt + 3 * 4), kernels=4)  # upcast, max, exp-sum, grad
    fwd = gemm + norm + ce
    bwd = 2 * gemm + 2 * norm + ce
    fwd, bwd, sources["output"] = _profiled(profile, "logits", cfg, t, fwd, bwd)
    fits = profile.comm if profile else None
    link = comm.group_link(cluster, tp, 1)
    tp_comm = 3 * comm.all_reduce_s(4 * tokens, tp, link, fits)
    tp_comm += 2 * _tp_sync_s(act_dt * tokens * m.hidden_size, tp, link, fits, cfg.sequence_parallel)  # f/g
    act = memory.logits_activation_bytes(m, t, b, tp, cfg.cp, cfg.sequence_parallel)
    return _replicated_layer(
        "output", cluster, t, cfg, flops.output_params(m) / tp, fwd, bwd, tp_comm,
        memory.ActivationBytes(act, act, act), 3.0 * flops.logits_flops(m, b * t.seq_length) / (tp * cfg.cp), fits,
    )


def _p2p_s(m_hidden: float, cluster, t, cfg, profile) -> float:
    """Activation send between adjacent pipeline ranks (tp*cp*dp ranks apart). With SP (or
    Narayanan §4.1's scatter/gather optimisation) each TP rank sends 1/t of it."""
    if cfg.pp <= 1:
        return 0.0
    act_dt = DTYPE_BYTES[t.dtype] if t.dtype != "fp8" else 2
    nbytes = act_dt * cfg.micro_batch_size * t.seq_length / cfg.cp * m_hidden / cfg.tp
    stride = cfg.tp * cfg.cp * cfg.dp
    link = comm.group_link(cluster, 2, stride)
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
    sources: dict[str, str] = {}
    if isinstance(model, LayerListSpec):
        blocks = tuple(_generic_cost(layer, cluster, training, cfg, profile, i) for i, layer in enumerate(model.layers))
        hidden_bytes = max((layer.output_bytes for layer in model.layers), default=0.0)
        act_dt = DTYPE_BYTES[training.dtype] if training.dtype != "fp8" else 2
        sources["block"] = "analytic"
        return LayerTable(
            blocks=blocks,
            embedding=_empty("embedding"),
            output=_empty("output"),
            p2p_s=_p2p_s(hidden_bytes / (act_dt * training.seq_length), cluster, training, cfg, profile),
            sources=sources,
        )
    cache: dict[bool, LayerCost] = {}
    blocks = []
    for i in range(model.num_layers):
        moe = model.moe is not None and model.moe.is_moe_layer(i)
        if moe not in cache:
            cache[moe] = _block_cost(model, cluster, training, cfg, i, profile, sources)
        blocks.append(cache[moe])
    # collectives: measured alpha-beta fits (profiler.comm) or the catalog's link numbers
    sources["comm"] = "profile" if profile is not None and profile.comm else "analytic"
    return LayerTable(
        blocks=tuple(blocks),
        embedding=_embedding_cost(model, cluster, training, cfg, profile, sources),
        output=_output_cost(model, cluster, training, cfg, profile, sources),
        p2p_s=_p2p_s(model.hidden_size, cluster, training, cfg, profile),
        sources=sources,
    )
