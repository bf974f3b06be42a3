"""Compute time of one block on one GPU for one micro-batch: the GEMMs (dense, expert, FP8
casts), the attention core (FlashAttention-2: backward = 2.5 x forward, Dao 2023 §3.2), the
memory-bound elementwise kernels, and the host-issue floor of a launch-bound layer. A profile's
measured rows replace them at the shapes it measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.engines import kernels
from cost_model.hardware import compute
from cost_model.model import attention, flops
from cost_model.specs.inputs import (
    CalibrationProfile,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)
from cost_model.specs.vocab import (
    ATTENTION_EAGER,
    CP_A2A,
    CP_A2A_P2P,
    CP_ALL_GATHER,
    DTYPE_BYTES,
    DTYPE_FP8,
    ENGINE_TORCHTITAN,
    KIND_BLOCK,
    KIND_MOE_BLOCK,
    MLP_SWIGLU,
    POSITION_ROPE,
)
from cost_model.terms import moe
from cost_model.terms.geometry import (
    BlockCompute,
    BlockGeometry,
    attention_dtype,
    cp_kind,
    num_micro_batches,
    repeats_kv,
)

FLASH_BWD_FACTOR = 2.5  # FlashAttention-2 backward does 5 matmuls to forward's 2 (Dao 2023 §3.2)


@dataclass(frozen=True)
class Gemms:
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


def gemms_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry) -> Gemms:
    """Forward GEMMs of one block per TP shard (Megatron column/row-parallel splits,
    Shoeybi et al. 2019 §3): the attention projections of attention.sharded_projections
    (MHA/GQA Q, K, V, O; MLA's down/up projections), and the dense MLP or the MoE experts
    (balanced routing: each local expert gets tokens*top_k*ep/E tokens), shared experts and
    router. FP8 runs them at the fp8 rate (the casts are priced in fp8_casts_s)."""
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
        return Gemms(qkv_s + out_s + up_s + down_s, f, qkv_s, up_s, act_in, grad_out, weights, out_s, down_s)
    e = m.moe
    moe_s, f_elem, experts_s = moe_fwd_s(m, gpu, t, cfg, geo)
    f = e.ffn_hidden_size
    n_local = max(1, e.num_experts // cfg.ep)
    # elements the fp8 casts touch (fp8_casts_s): each token's top_k expert inputs/outputs
    act_in += e.top_k * (h + f / tp)
    grad_out += e.top_k * (n_up * f / tp + h)
    weights += n_local * (n_up + 1) * f * h / tp
    if e.num_shared_experts:
        fs = e.shared_ffn * e.num_shared_experts
        act_in += h + fs / tp
        grad_out += n_up * fs / tp + h
        weights += (n_up + 1) * fs * h / tp
    # the expert GEMMs hide no TP collective (their tokens arrive by all-to-all): up_s 0
    return Gemms(qkv_s + out_s + moe_s, f_elem, qkv_s, 0.0, act_in, grad_out, weights, experts_s=experts_s)


def moe_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig,
               geo: BlockGeometry) -> tuple[float, float, float]:
    """The expert part of an MoE block's forward (moe.py): grouped expert GEMMs on the
    tokens each local expert receives, shared experts, router, token (un)permutation, the
    kernel launches, and the experts' output bias where the engine adds it outside the GEMM.
    Returns (seconds, FFN width the activation function touches per token, as
    elementwise_fwd_s counts it: top_k routed copies at the busiest rank's load plus the
    shared experts, and the routed experts' grouped GEMMs alone: the overlapped 1F1B's mlp
    node, combined_saving_s)."""
    e = m.moe
    lay = moe.layout(m, t, cfg)
    experts = moe.expert_gemms_fwd_s(m, gpu, t, lay)
    s = experts + moe.shared_expert_gemms_fwd_s(m, gpu, t, cfg, geo.tokens)
    s += moe.router_fwd_s(m, gpu, t, lay, geo.act_dt)
    s += moe.permute_fwd_s(m, gpu, lay, geo.act_dt, cfg.moe_dispatcher)
    s += moe.launch_overhead_fwd_s(m, gpu, cfg, lay, quantize_kernels(gpu, t, cfg, geo))
    s += moe.expert_bias_fwd_s(m, gpu, lay, geo.kernels.expert_bias)
    return s, e.ffn_hidden_size * e.top_k * lay.imbalance + e.shared_ffn * e.num_shared_experts, experts


def fp8_casts(gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry) -> kernels.Fp8Casts:
    """The engine's fp8 casts under the recipe it runs on this GPU (kernels.fp8_recipe)."""
    return geo.kernels.fp8_for(geo.compiled, kernels.fp8_recipe(cfg.engine, gpu, t))


def quantize_kernels(gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry) -> int:
    """Kernels one fp8 quantize launches (kernels.Fp8Casts.quantize_kernels); 0 without fp8."""
    return fp8_casts(gpu, t, cfg, geo).quantize_kernels if geo.fp8 else 0


def fp8_casts_s(gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry, g: Gemms) -> tuple[float, float]:
    """(forward, backward) seconds of the fp8 quantisation kernels around one block's GEMMs
    (kernels.Fp8Casts: memory-bound passes per GEMM input, the output gradient and the
    transposes for the weight gradient), and the cast of the fp8 weight copy: every
    micro-batch for torchao's dynamic scaling, once per step for Transformer Engine
    (amortised over the step's micro-batches). Zero unless training.dtype is fp8."""
    if t.dtype != DTYPE_FP8:
        return 0.0, 0.0
    c = fp8_casts(gpu, t, cfg, geo)
    w_share = 1.0 if c.weight_per_micro_batch else 1.0 / num_micro_batches(t, cfg)
    fwd = geo.tokens * g.act_in_elems * c.act_fwd + g.weight_elems * c.weight * w_share
    bwd = geo.tokens * (g.grad_out_elems * c.grad_bwd + g.act_in_elems * c.act_bwd)
    n = 7  # one pass per GEMM input (q/k/v fused, o, up, down ...)
    return compute.memory_bound_time_s(gpu, fwd, kernels=n), compute.memory_bound_time_s(gpu, bwd, kernels=2 * n)


def attention_keys_per_call(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry) -> tuple[float, int]:
    """(keys per fused-attention kernel call, calls per forward) as the CP variant runs it:
    the whole sequence without CP, after an all-gather of K/V (Llama 3 §3.3.2; Megatron
    cp_comm_type all_gather) or after Ulysses' all-to-all (a2a: full sequence, heads/cp);
    one local K/V chunk of s/cp per ring step (p2p, torch context_parallel ring), in the
    2*cp - 1 half-chunk calls Megatron's load-balanced causal ring makes
    (megatron/core/transformer/dot_product_attention / TE context_parallel.py
    AttnFuncWithCPAndKVP2P). A window bounds the keys."""
    w = attention.window(m, geo.index)
    s = float(t.seq_length)
    kind = cp_kind(cfg)
    if cfg.cp <= 1 or kind in (CP_ALL_GATHER, CP_A2A):
        keys, calls = s, 1
    elif kind == CP_A2A_P2P:
        inner, outer = attention.a2a_p2p_sizes(m, cfg.tp, cfg.cp)
        keys, calls = s * inner / cfg.cp, outer
    else:
        keys, calls = s / cfg.cp, cfg.cp
    return (min(keys, float(w)) if w else keys), calls


def attention_core_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry) -> tuple[float, float]:
    """Attention core (QK^T, softmax, PV), forward and backward seconds. Eager: materialised
    scores as batched GEMMs over b * heads plus the memory-bound scale-mask-softmax and
    dropout (Korthikanti §4.1), backward 2x. Flash: the causal pairs only
    (flops.attention_core_flops_causal; windows and chunks), on the engine's fused kernel
    (kernels.py) at the efficiency compute.attention_efficiency gives for the keys per
    call and the head dim; backward FLASH_BWD_FACTOR x the forward FLOPs at the backward
    kernel's efficiency. FP8 recipes keep attention in bf16 (attention_dtype).
    Under a context-parallel ring (calls > 1) the kernels take the engine's
    ring_attention_slowdown times as long (kernels.MEGATRON_RING_ATTENTION_SLOWDOWN: measured
    end to end on NeMo's long-sequence tables; the ring's K/V sends are priced apart, in
    block_cp_s, and hide under this time).
    Attention sinks (GPT-OSS, Megatron softmax_type "learnable") and (left, 0) sliding
    windows stay on the fused kernel under Megatron: Transformer Engine disables only
    FlashAttention for a non-vanilla softmax and runs cuDNN's F16_arbitrary_seqlen backend
    with cuDNN >= 9.13.1 (transformer_engine/pytorch/attention/dot_product_attention/utils.py
    get_attention_backend, common/fused_attn/fused_attn.cpp nvte_get_fused_attn_backend @v2.9,
    the TE of Megatron-Bridge 25.11; its GPT-OSS provider falls back to the local, unfused
    path only below TE 2.8: src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py @5776a6d);
    the sink's one logit per head adds no priced work."""
    dt, b, d = attention_dtype(t), cfg.micro_batch_size, m.kv_channels
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
    keys, calls = attention_keys_per_call(m, t, cfg, geo)
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
            kv_elems = geo.tokens * attention.kv_elems_per_token(m, repeats_kv(geo)) / cfg.tp
            step_f, step_b = attention.torch_ring_step_bytes(q_elems, kv_elems, act_dt)
            once_f, once_b = attention.torch_ring_once_bytes(q_elems, kv_elems, act_dt)
            fwd += compute.memory_bound_time_s(gpu, (calls - 1) * step_f + once_f, kernels=calls)
            bwd += compute.memory_bound_time_s(gpu, calls * step_b + once_b, kernels=5 * calls)
    return fwd, bwd


def elementwise_fwd_s(m: TransformerSpec, gpu, cfg: ParallelConfig, geo: BlockGeometry, f_elem: float) -> float:
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


def glu_clamp_s(m: TransformerSpec, gpu, cfg: ParallelConfig, geo: BlockGeometry, f_elem: float) -> tuple[float, float]:
    """(forward, backward) seconds of the memory passes a clamped gated activation
    (TransformerSpec.swiglu_limit) adds as the engine runs it (kernels.GluClamp: Megatron's
    eager clamps and concatenation before its fused quick-GEGLU, their autograd masks and
    the split backward), over the f_elem-wide activation output of every token, split by tp
    like the activation itself (elementwise_fwd_s). Zero without a clamp or where the
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


def op_sac_gemms_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry) -> float:
    """Forward GEMM time a dense block re-runs in its backward under torchtitan's per-op
    selective AC (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py,
    torchtitan 0.3.0 SelectiveAC._wrap_block): it counts aten.mm / aten.linear calls in
    forward order and recomputes every second one (the count even), saving the rest. Llama
    order: wq(1) wk(2) wv(3) wo(4), then w1(5) w3(6) w2(7) (FeedForward w2(silu(w1 x) * w3 x)),
    so wk, wo and w3 are recomputed. FP8 linears (torchao Float8Linear) count alike: their mm
    reaches the policy's dispatch mode as aten.mm on the float8 tensor subclass (a mode
    dispatches before a subclass lowers the op to aten._scaled_mm); they re-run at the fp8
    rate, as they ran (the H200 fp8 run's measured 47.96 GiB, tests/cost_model
    test_memory_engine, rules out saving all seven outputs)."""
    dt, tokens, tp = t.dtype, geo.tokens, cfg.tp
    shapes = [(n, k) for _name, n, k in attention.sharded_projections(m, tp)]
    f, h = m.ffn_hidden_size, m.hidden_size
    shapes += [(f / tp, h)] * (2 if m.mlp == MLP_SWIGLU else 1) + [(h, f / tp)]
    return sum(compute.gemm_time_s(gpu, dt, tokens, n, k) for i, (n, k) in enumerate(shapes, start=1) if i % 2 == 0)


def block_compute(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry,
                   profile: CalibrationProfile | None) -> BlockCompute:
    """Forward and backward compute of one block: GEMMs + attention core + elementwise,
    backward 2x the GEMMs and elementwise (two GEMMs per forward one, Narayanan et al.
    SC'21 §5.1) plus the core's own backward. A profiled (kind, tp, micro-batch, seq/cp)
    entry replaces the forward and backward totals, or the profile's block rows scale them
    (profiled_times), and the core keeps its analytic share of the forward."""
    g = gemms_fwd_s(m, gpu, t, cfg, geo)
    gemm_s = g.total_s
    core_s, core_bwd_s = attention_core_s(m, gpu, t, cfg, geo)
    elem_s = elementwise_fwd_s(m, gpu, cfg, geo, g.ffn_elems)
    # the clamp's backward is not twice its forward: a third of its step total rides in the
    # elementwise forward, which the backward doubles, so the block's total is exact
    elem_s += sum(glu_clamp_s(m, gpu, cfg, geo, g.ffn_elems)) / 3.0
    cast_fwd, cast_bwd = fp8_casts_s(gpu, t, cfg, geo, g)
    fwd = gemm_s + core_s + elem_s + cast_fwd
    bwd = 2.0 * (gemm_s + elem_s) + core_bwd_s + cast_bwd
    kind = KIND_MOE_BLOCK if geo.moe_layer else KIND_BLOCK
    fwd_p, bwd_p, source = profiled_times(profile, kind, cfg, t, fwd, bwd)
    scale = fwd_p / max(1e-12, fwd) if source != "analytic" else 1.0
    # torchtitan's per-op SAC re-runs, of a dense block's forward, every second bf16 GEMM and
    # every op outside its save list: the norms, residual adds, RoPE, the activation and the
    # fp8 casts (op_sac_gemms_fwd_s; the attention core and the saved GEMMs are kept)
    op_sac_s = 0.0
    if cfg.engine == ENGINE_TORCHTITAN and not geo.moe_layer:
        op_sac_s = op_sac_gemms_fwd_s(m, gpu, t, cfg, geo) + elem_s + cast_fwd
    # the weight-gradient GEMMs: one per forward GEMM, as long (the other backward GEMM is the
    # input gradient), scaled as the backward is by a profile; zero-bubble schedules run them
    # apart from the rest of the backward (pipeline/simulator.py)
    bwd_scale = bwd_p / max(1e-12, bwd) if source != "analytic" else 1.0
    return BlockCompute(fwd_p, bwd_p, core_s * scale, core_bwd_s, source, g.qkv_s * scale, g.up_s * scale,
                         g.out_s * scale, g.down_s * scale, g.experts_s * scale, op_sac_s * scale,
                         wgrad_s=min(gemm_s * bwd_scale, bwd_p),
                         wgrad_held_bytes=geo.tokens * g.grad_out_elems * geo.act_dt)


def host_bound_excess_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry,
                         c: BlockCompute, comm_s: float) -> tuple[float, float]:
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
    fwd, bwd = moe.host_issue_s(m, gpu, cfg, moe.layout(m, t, cfg), quantize_kernels(gpu, t, cfg, geo))
    excess = fwd + bwd - (c.fwd_s + c.bwd_s + comm_s)
    if excess <= 0:
        return 0.0, 0.0
    return excess * fwd / (fwd + bwd), excess * bwd / (fwd + bwd)


def profiled_times(profile, kind: str, cfg: ParallelConfig, t: TrainingSpec, fwd: float, bwd: float):
    """(fwd, bwd, source) of a layer: a profiled (kind, tp, micro-batch, seq/cp) entry
    replaces the analytic fwd/bwd ("profile"); without one, the profile's rows of that kind
    scale it by their measured / analytic ratio (layer_table's `layer_scale`, "profile-fit")."""
    timing = profile.layers.get((kind, cfg.tp, cfg.micro_batch_size, t.seq_length // cfg.cp)) if profile else None
    if timing is not None:
        return timing.fwd_s, timing.bwd_s, "profile"
    scale = profile.layer_scale.get(kind) if profile else None
    return (fwd * scale[0], bwd * scale[1], "profile-fit") if scale else (fwd, bwd, "analytic")
