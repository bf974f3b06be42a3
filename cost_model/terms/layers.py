"""The per-layer cost table: what one block (and the embedding / output layer) costs one GPU
for one micro-batch under given degrees, assembled from the cost terms beside it (compute.py,
tp.py, cp.py, ep.py, dp.py, states.py; activations.py and transients.py; the peak rule in
memory.py). The pipeline composition (cost_model/pipeline/), the estimate and the planner's
ILP all read this one table, so they agree by construction. Times are per micro-batch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

from cost_model.hardware import calibration, comm, compute
from cost_model.model import flops
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
    ENGINE_TORCHTITAN,
    KIND_BLOCK,
    KIND_EMBEDDING,
    KIND_LOGITS,
    KIND_MOE_BLOCK,
)
from cost_model.terms import moe
from cost_model.terms.act_offload import NO_OFFLOAD, block_act_offload
from cost_model.terms.activations import (
    ActivationBytes,
    activation_dtype_bytes,
    block_activation_bytes,
    block_working_set_bytes,
    embedding_activation_bytes,
    logits_activation_bytes,
    loss_reserved_bytes,
    loss_transient_bytes,
)
from cost_model.terms.compute import block_compute, host_bound_excess_s, profiled_times
from cost_model.terms.cp import block_cp_s
from cost_model.terms.dp import (
    dense_dp_size,
    dp_last_bucket_s,
    expert_last_bucket_s,
    grad_sync_exposed_s,
    grad_sync_s,
    zero3_s,
)
from cost_model.terms.ep import block_ep_s, combined_saving_s
from cost_model.terms.geometry import attention_dtype, geometry
from cost_model.terms.layer_offload import block_layer_offload
from cost_model.terms.offload import host_bytes
from cost_model.terms.params import block_keys, block_params
from cost_model.terms.states import (
    block_states,
    layer_state_bytes,
    layer_step_bytes,
    optimizer_step_s,
)
from cost_model.terms.tp import block_tp_bwd_s, block_tp_fwd_s, op_sac_tp_refwd_s, tp_sync_s


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
    act: ActivationBytes
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    dp_sync_s: float  # per-step gradient sync of this layer's parameters (zero 0-2)
    optimizer_s: float  # per-step optimizer update of this layer's shard
    flops_model: float  # model FLOPs (fwd+bwd) of the whole layer for one micro-batch, all TP ranks
    # live only while the layer runs: a block's backward working set, the output layer's loss
    # transient (block_working_set_bytes, loss_transient_bytes)
    transient_bytes: float = 0.0
    # with the overlapped 1F1B all-to-all (ParallelConfig.moe_a2a_overlap): ep_comm_s is what
    # stays exposed when this layer's forward and backward each run combined with another
    # micro-batch's (moe.combined_pair_s); a forward or backward run alone (pipeline warm-up,
    # cool-down) exposes half of this more each (stages.rank_cost)
    ep_unpaired_s: float = 0.0
    # of compute_s (its forward share also in fwd_s): the wait on the host's kernel issue of a
    # host-synchronised MoE layer beyond its device time (host_bound_excess_s)
    host_wait_s: float = 0.0
    # of compute_s: the backward's weight-gradient GEMMs (geometry.BlockCompute.wgrad_s), the
    # W work zero-bubble schedules defer; 0 for the embedding and output layers (their whole
    # backward counts as input-gradient work: never a shorter critical path than they run)
    wgrad_s: float = 0.0
    # bytes one micro-batch keeps from the input-gradient op to its weight-gradient op besides
    # its saved activations (geometry.BlockCompute.wgrad_held_bytes)
    wgrad_held_bytes: float = 0.0
    # host memory of the layer's offloaded optimizer states (ParallelConfig.optimizer_offload)
    host_bytes: float = 0.0
    # activation offload (ParallelConfig.activation_offload, terms/act_offload.py): of compute_s
    # (its forward share also in fwd_s), the copies' time beyond the compute they run under;
    # the host memory one micro-batch's copies take (times the micro-batches in flight)
    act_offload_wait_s: float = 0.0
    act_host_bytes: float = 0.0
    # allocated only around the optimizer step, when the activations are freed
    # (states.layer_step_bytes): the rank's peak is the larger of the two (stages.rank_cost)
    step_bytes: float = 0.0

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

    @cached_property
    def has_step_bytes(self) -> bool:
        """Whether any layer's optimizer step allocates its own buffers (LayerCost.step_bytes)."""
        return any(x.step_bytes > 0 for x in (self.embedding, self.output, *self.block_kinds))

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
        """The backward working set of the block in flight (block_working_set_bytes:
        activation gradients, and with zero 3 the gathered parameters of the current and the
        prefetched block and its unsharded gradient), the largest block's; the name is the
        ZeRO-3 buffer it once was alone."""
        return max((b.transient_bytes for b in self.blocks), default=0.0)

    @cached_property
    def selective_buffer_bytes(self) -> float:
        """Under selective recompute, what a block re-materialises during its backward: the
        tensors its policy drops (act.none - act.selective), the largest block's."""
        return max((b.act.none - b.act.selective for b in self.blocks), default=0.0)


_ZERO_ACT = ActivationBytes(0.0, 0.0, 0.0)


def selective_recompute_s(m: TransformerSpec, cluster, t: TrainingSpec, cfg: ParallelConfig, geo, c, fits) -> float:
    """Extra time per micro-batch of a block under the engine's selective recompute:
    torchtitan's per-op SAC re-runs its unsaved forward ops and TP gathers in the backward
    (compute.op_sac_gemms_fwd_s, tp.op_sac_tp_refwd_s; activations' op-SAC bytes are what it
    keeps); Korthikanti's selective (Megatron) the attention core, which only eager attention
    materialises (§5; FlashAttention recomputes it anyway)."""
    if cfg.engine == ENGINE_TORCHTITAN and not geo.moe_layer:
        return c.op_sac_recompute_s + op_sac_tp_refwd_s(m, cluster, cfg, geo, fits)
    return c.core_fwd_s if t.attention == ATTENTION_EAGER else 0.0


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
    its forward all-to-alls (half of ep_comm); selective recompute repeats what the engine's
    policy drops (selective_recompute_s)."""
    geo = geometry(m, t, cfg, index)
    fits = profile.comm if profile else None
    c = block_compute(m, cluster.gpu, t, cfg, geo, profile)
    sources[KIND_MOE_BLOCK if geo.moe_layer else KIND_BLOCK] = c.source
    tp_fwd = block_tp_fwd_s(m, cluster, cfg, geo, c, fits)
    tp_bwd = block_tp_bwd_s(m, cluster, cfg, geo, c, fits)
    ep_comm = block_ep_s(m, cluster, t, cfg, geo, fits)
    cp_comm = block_cp_s(m, cluster, cfg, geo, c, fits)
    unpaired = combined_saving_s(cluster, cfg, geo, c, tp_fwd, tp_bwd, cp_comm, ep_comm)
    host_fwd, host_bwd = host_bound_excess_s(m, cluster.gpu, t, cfg, geo, c,
                                              tp_fwd + tp_bwd + cp_comm + ep_comm - unpaired)
    dense, expert = block_params(m, cfg, geo.moe_layer)
    st = block_states(cluster, t, cfg, dense, expert, c, fits)
    b = cfg.micro_batch_size
    load = moe.layout(m, t, cfg).imbalance if geo.moe_layer and m.moe is not None else 1.0
    act = block_activation_bytes(m, t, b, cfg.tp, cfg.cp, cfg.sequence_parallel, geo.moe_layer, cfg.engine,
                                        expert_load=load)
    working_set = block_working_set_bytes(m, t, cfg, geo.moe_layer, dense + expert)
    off = block_act_offload(m, cluster, t, cfg, c.fwd_s, c.bwd_s, geo.moe_layer, load)
    if off is not NO_OFFLOAD:
        # the offloaded inputs leave every micro-batch in flight; two blocks' come back at the
        # backward (terms/act_offload.py)
        act = ActivationBytes(none=act.none - off.saved_bytes, selective=act.selective - off.saved_bytes,
                              full=act.full)
        working_set += off.held_bytes
    model_f = 3.0 * flops.block_flops(m, b * t.seq_length, t.seq_length, geo.moe_layer, index=index,
                                      causal=True).total / (cfg.tp * cfg.cp)
    return LayerCost(
        name=f"block{index}",
        compute_s=c.fwd_s + c.bwd_s + host_fwd + host_bwd + off.fwd_exposed_s + off.bwd_exposed_s,
        fwd_s=c.fwd_s + host_fwd + off.fwd_exposed_s,
        tp_comm_s=tp_fwd + tp_bwd,
        cp_comm_s=cp_comm,
        ep_comm_s=ep_comm - unpaired,
        zero3_comm_s=st.zero3_comm_s,
        recompute_full_s=c.fwd_s + host_fwd + tp_fwd + (ep_comm / 2),
        recompute_selective_s=selective_recompute_s(m, cluster, t, cfg, geo, c, fits),
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
        wgrad_s=c.wgrad_s,
        wgrad_held_bytes=c.wgrad_held_bytes,
        host_bytes=st.host_bytes,
        act_offload_wait_s=off.fwd_exposed_s + off.bwd_exposed_s,
        act_host_bytes=off.copied_bytes,
        step_bytes=st.step_bytes,
    )


def _layer_offloaded(m: TransformerSpec, cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig,
                     index: int, blk: LayerCost) -> LayerCost:
    """Block `index` under the layer-level offload (ParallelConfig.cpu_offload_layers,
    terms/layer_offload.py): an offloaded block keeps only its small saved tensors on the GPU
    (the engine's peak is the L-N blocks never offloaded or reloaded), puts its copies in host
    memory and adds its share of the copies' wait beyond the compute they overlap (its forward
    and backward, host waits included, as the windows). Validation keeps it apart from the
    module-level offload, so the block has none of that."""
    lay = block_layer_offload(m, cluster, t, cfg, index, blk.fwd_s, blk.compute_s - blk.fwd_s)
    if lay is None:
        return blk
    wait_s = lay.fwd_exposed_s + lay.bwd_exposed_s
    kept = lay.kept_bytes
    return replace(blk, compute_s=blk.compute_s + wait_s, fwd_s=blk.fwd_s + lay.fwd_exposed_s,
                   act=ActivationBytes(none=kept, selective=kept, full=min(blk.act.full, kept)),
                   act_offload_wait_s=blk.act_offload_wait_s + wait_s, act_host_bytes=lay.copied_bytes)


def _replicated_layer(
    name: str, cluster, t, cfg, params: float, fwd: float, bwd: float, tp_comm: float,
    act: ActivationBytes, flops_model: float, fits, recompute_full_s: float = 0.0, tail_s: float = 0.0,
    transient_bytes: float = 0.0,
) -> LayerCost:
    """A layer whose `params` (per TP rank) are replicated over the dense data-parallel group:
    its model states, ZeRO-3 gathers, gradient sync and optimizer step."""
    dp, tp = dense_dp_size(cfg), cfg.tp
    w, g, o = layer_state_bytes(t, cfg, params, dp)
    sync = grad_sync_s(cluster, t, cfg, params, dp, tp, fits)
    return LayerCost(
        name=name,
        compute_s=fwd + bwd,
        fwd_s=fwd,
        tp_comm_s=tp_comm,
        cp_comm_s=0.0,
        ep_comm_s=0.0,
        zero3_comm_s=zero3_s(cluster, t, cfg, params, dp, tp, fwd, bwd, fits),
        recompute_full_s=recompute_full_s,
        recompute_selective_s=0.0,
        act=act,
        weights_bytes=w,
        grads_bytes=g,
        optimizer_bytes=o,
        dp_sync_s=sync,
        optimizer_s=optimizer_step_s(cluster, t, cfg, params, dp) + grad_sync_exposed_s(cluster, t, cfg, [(params, dp, tp)], fits)
        + tail_s,
        flops_model=flops_model,
        transient_bytes=transient_bytes,
        host_bytes=host_bytes(t, cfg, params, dp),
        step_bytes=layer_step_bytes(t, cfg, params, dp),
    )


@lru_cache(maxsize=64)
def _total_params(m: TransformerSpec) -> float:
    """flops.total_params, once per model (a search builds thousands of tables)."""
    return flops.total_params(m)


def _embedding_cost(m: TransformerSpec, cluster, t, cfg, profile, sources) -> LayerCost:
    """Vocab-parallel embedding lookup (Megatron): gather rows, all-reduce the partial
    outputs over TP (reduce-scatter with SP); backward scatter-adds into the gradient."""
    gpu, tp, b = cluster.gpu, cfg.tp, cfg.micro_batch_size
    act_dt = activation_dtype_bytes(t)
    tokens = b * t.seq_length / cfg.cp
    nbytes = 2 * act_dt * tokens * m.hidden_size
    fwd = compute.memory_bound_time_s(gpu, nbytes, kernels=2)
    bwd = compute.memory_bound_time_s(gpu, 2 * nbytes, kernels=2)
    fwd, bwd, sources[KIND_EMBEDDING] = profiled_times(profile, KIND_EMBEDDING, cfg, t, fwd, bwd)
    fits = profile.comm if profile else None
    tp_comm = 2 * tp_sync_s(act_dt * tokens * m.hidden_size, tp, comm.group_link(cluster, tp, 1), fits,
                             cfg.sequence_parallel)
    act = embedding_activation_bytes(m, t, b, tp, cfg.cp, cfg.sequence_parallel)
    params_rank = _total_params(m) / tp  # at least one bucket's worth on the first stage
    return _replicated_layer(
        KIND_EMBEDDING, cluster, t, cfg, flops.embedding_params(m) / tp, fwd, bwd, tp_comm,
        ActivationBytes(act, act, act), 0.0, fits,
        tail_s=dp_last_bucket_s(cluster, t, cfg, params_rank, fits) + expert_last_bucket_s(m, cluster, t, cfg, fits),
    )


def _output_cost(m: TransformerSpec, cluster, t, cfg, profile, sources) -> LayerCost:
    """Final norm, vocab-parallel logits GEMM and fp32 cross-entropy (Megatron
    vocab_parallel_cross_entropy: 3 small all-reduces of per-token scalars). FP8 recipes
    leave the output layer in bf16 (Megatron-Core builds it outside the TE fp8 region;
    torchtitan's Float8 converter filters `output` out)."""
    gpu, tp, b = cluster.gpu, cfg.tp, cfg.micro_batch_size
    dt = attention_dtype(t)
    act_dt = activation_dtype_bytes(t)
    tokens = b * t.seq_length / cfg.cp
    v_local = m.vocab_size / tp
    gemm = compute.gemm_time_s(gpu, dt, tokens, v_local, m.hidden_size)
    # final norm: replicated over TP ranks unless sequence-parallel
    norm = compute.memory_bound_time_s(gpu, 2 * act_dt * tokens * m.hidden_size / (tp if cfg.sequence_parallel else 1), kernels=1)
    ce = compute.memory_bound_time_s(gpu, tokens * v_local * (act_dt + 3 * 4), kernels=4)  # upcast, max, exp-sum, grad
    fwd = gemm + norm + ce
    bwd = 2 * gemm + 2 * norm + ce
    fwd, bwd, sources["output"] = profiled_times(profile, KIND_LOGITS, cfg, t, fwd, bwd)
    fits = profile.comm if profile else None
    link = comm.group_link(cluster, tp, 1)
    tp_comm = 3 * comm.all_reduce_s(4 * tokens, tp, link, fits)
    tp_comm += 2 * tp_sync_s(act_dt * tokens * m.hidden_size, tp, link, fits, cfg.sequence_parallel)  # f/g
    act = logits_activation_bytes(m, t, b, tp, cfg.cp, cfg.sequence_parallel, cfg.engine)
    params = flops.output_params(m) / tp
    return _replicated_layer(
        "output", cluster, t, cfg, params, fwd, bwd, tp_comm,
        ActivationBytes(act, act, act), 3.0 * flops.logits_flops(m, b * t.seq_length) / (tp * cfg.cp), fits,
        transient_bytes=loss_transient_bytes(m, t, cfg, params),
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
    dp = dense_dp_size(cfg)
    w, g, o = layer_state_bytes(t, cfg, proj_params, dp)
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
        act=ActivationBytes(out.act.none + n * act, out.act.selective + n * act, out.act.full + n * act),
        weights_bytes=out.weights_bytes + n * (blk.weights_bytes + w),
        grads_bytes=out.grads_bytes + n * (blk.grads_bytes + g),
        optimizer_bytes=out.optimizer_bytes + n * (blk.optimizer_bytes + o),
        dp_sync_s=out.dp_sync_s + n * (blk.dp_sync_s + grad_sync_s(cluster, t, cfg, proj_params, dp, cfg.tp, fits)),
        optimizer_s=out.optimizer_s + n * (blk.optimizer_s + optimizer_step_s(cluster, t, cfg, proj_params, dp)),
        flops_model=out.flops_model + 3.0 * flops.mtp_flops(m, cfg.micro_batch_size * t.seq_length, t.seq_length)
        / (cfg.tp * cfg.cp),
        transient_bytes=max(out.transient_bytes, blk.transient_bytes),
        host_bytes=out.host_bytes + n * (blk.host_bytes + host_bytes(t, cfg, proj_params, dp)),
        act_offload_wait_s=n * blk.act_offload_wait_s,
        act_host_bytes=n * blk.act_host_bytes,
        step_bytes=out.step_bytes + n * (blk.step_bytes + layer_step_bytes(t, cfg, proj_params, dp)),
    )


def _p2p_s(m_hidden: float, cluster, t, cfg, profile) -> float:
    """Activation send between adjacent pipeline ranks (tp*cp*dp ranks apart). With SP (or
    Narayanan §4.1's scatter/gather optimisation) each TP rank sends 1/t of it."""
    if cfg.pp <= 1:
        return 0.0
    act_dt = activation_dtype_bytes(t)
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
        ActivationBytes(act_none, act_none, min(act_none, act_full)), 3 * layer.fwd_flops * b, fits,
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
    return next((i for i, (is_moe, _) in enumerate(block_keys(model)) if is_moe == moe), None)


@lru_cache(maxsize=64)
def _first_of_kind(model: TransformerSpec) -> tuple[tuple[int, tuple[bool, int | None]], ...]:
    """(index, kind) of the first block of each kind, in model order."""
    first: dict[tuple, int] = {}
    for i, key in enumerate(block_keys(model)):
        first.setdefault(key, i)
    return tuple((i, key) for key, i in first.items())


def _layer_table(model, cluster, training, cfg, profile) -> LayerTable:
    sources: dict[str, str] = {}
    if isinstance(model, LayerListSpec):
        blocks = tuple(_generic_cost(layer, cluster, training, cfg, profile, i) for i, layer in enumerate(model.layers))
        hidden_bytes = max((layer.output_bytes for layer in model.layers), default=0.0)
        act_dt = activation_dtype_bytes(training)
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
    blocks = [cache[key] for key in block_keys(model)]
    if cfg.cpu_offload_layers:
        blocks = [_layer_offloaded(model, cluster, training, cfg, i, b) for i, b in enumerate(blocks)]
    # collectives: measured alpha-beta fits (profiler.comm) or the catalog's link numbers
    sources["comm"] = "profile" if profile is not None and profile.comm else "analytic"
    output = _output_cost(model, cluster, training, cfg, profile, sources)
    if model.num_nextn_predict_layers > 0 and blocks:
        output = _with_mtp(model, cluster, training, cfg, output, blocks[-1])
    # the loss's share of the reserved peak beside the blocks' cached temporaries
    held = max(b.act.none for b in cache.values())
    output = replace(output, transient_bytes=loss_reserved_bytes(
        model, training, cfg, output.transient_bytes, held))
    return LayerTable(
        blocks=tuple(blocks),
        embedding=_embedding_cost(model, cluster, training, cfg, profile, sources),
        output=output,
        p2p_s=_p2p_s(model.hidden_size, cluster, training, cfg, profile),
        sources=sources,
        combined_1f1b=cfg.moe_a2a_overlap,
    )
