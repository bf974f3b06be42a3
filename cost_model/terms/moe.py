"""Cost terms of one MoE block's expert part on one GPU, for one micro-batch, as Megatron-Core
runs it (megatron/core/transformer/moe/ at NVIDIA/Megatron-LM d98e8a64ddf3):

  router GEMM + top-k -> permute -> EP all-to-all (dispatch) -> expert-TP all-gather ->
  sort by local expert -> grouped GEMMs (fc1, activation, fc2, fc2 bias) -> unsort -> expert-TP
  reduce-scatter -> EP all-to-all (combine) -> unpermute (weighted sum of the top_k outputs)

(token_dispatcher.py MoEAlltoAllTokenDispatcher: dispatch_preprocess / token_dispatch /
dispatch_postprocess and the combine_* mirror; experts.py TEGroupedMLP; router.py TopKRouter).
Expert layers are laid out by MoE parallel folding (parallel_state.py
initialize_model_parallel): an EP group holds `ep` ranks `etp` apart, an expert-TP group
`etp` consecutive ranks, so the all-to-all stays inside an NVLink domain when ep*etp fits it.

Tokens: with sequence parallelism each TP rank routes its s/(cp*tp) tokens of every sequence
of the micro-batch (the attention block's output is sequence-sharded); without it each rank
routes all b*s/cp (repeated work). Balanced routing sends tokens*top_k copies, each local
expert receiving tokens*top_k*ep*etp/E on average.

Kernel launches: the router, the dispatcher's metadata, the unfused (un)permutation and the
per-local-expert GEMM and fp8 quantize kernels are counted from the engine code and charged
GPUSpec.kernel_overhead_s each (block_launches); a cost fixed per micro-batch, so it weighs
most for fine-grained experts at small micro-batches.

Routing load: the busiest rank's routed tokens over the mean, from balanced routing's
sampling spread (routing_imbalance), a factor the user states (training.moe_imbalance), or
token dropping with a capacity factor (training.moe_capacity_factor; Megatron's default is
dropless), padded to the capacity or not (load_factor); padded, the dispatcher makes no
host synchronisation (compute.host_bound_excess_s).

What this module does not model (stated so the numbers can be read):
HybridEP (the `flex` dispatcher's other backend, which Megatron-Bridge's GB200/GB300 recipes
select; DeepEP, the backend for DGX/HGX nodes, is priced: deepep_comm_fwd_s), the fused permute
and router (--moe-permute-fusion, --moe-router-fusion) and partial CUDA graphs (not emitted);
fp8 dispatch (fused_a2a.py at the same commit: "Currently, we do not support fp8 dispatch");
`--recompute-modules moe_act` (not emitted), which
would drop the clamped activation's saved tensors (GPT-OSS's clamp, TransformerSpec.swiglu_limit,
is priced per engine in kernels.GluClamp, memory.glu_clamp_bytes and compute.glu_clamp_s);
node-limited routing
(DeepSeek-V3 §2.1.2, at most 4 nodes per token) saves inter-node bytes only with a
de-duplicating dispatcher: with Megatron's alltoall dispatcher every routed copy crosses
the link to its expert's rank; with DeepEP (ParallelConfig.moe_dispatcher "deepep") a token
crosses the network once per destination node and NVLink once per destination rank
(expected_distinct_bins, deepep_comm_fwd_s).

Host-boundedness (host_issue_s): the dispatcher synchronises with the host in every MoE
layer, so a layer whose kernels the CPU issues more slowly than the GPU runs them takes the
CPU's time; priced for engines whose kernel table says so (kernels.EngineKernels.moe_host_sync).

The all-to-alls are exposed, unless the plan switches on Megatron-Core's overlapped 1F1B
(`--overlap-moe-expert-parallel-comm`, ParallelConfig.moe_a2a_overlap): then in every
steady-state step the forward of one micro-batch and the backward of another run layer by
layer on two CUDA streams, each one's dispatch and combine under the other's compute
(`combined_pair_s`); warm-up forwards and cool-down backwards run alone, exposed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from cost_model.engines.deepep import (
    DEEPEP_NUM_SMS,
    DEEPEP_NVL_PEERS,
    DEEPEP_NVSHMEM_CHUNK_BYTES,
    DEEPEP_NVSHMEM_INIT_BYTES,
    DEEPEP_RECV_TOKENS,
)
from cost_model.engines.kernels import ExpertBias
from cost_model.hardware import comm, compute
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.specs.vocab import DISPATCHER_DEEPEP, MLP_SWIGLU, ROUTER_SIGMOID

PERMUTE_INDEX_BYTES = 8  # int64 row index per routed token read by the (un)permute gather/scatter


@dataclass(frozen=True)
class ExpertLayout:
    """What one GPU sees of an MoE block under cfg's ep / etp (MoE parallel folding)."""

    tokens_in: float  # tokens this rank routes (b*s/cp, / tp with sequence parallelism)
    routed: float  # tokens_in * top_k: copies this rank sends to experts
    local_experts: int  # num_experts / ep
    tokens_per_expert: float  # tokens one local expert's GEMM runs on, busiest EP rank
    imbalance: float  # busiest EP rank's load / the mean (routing_imbalance)
    ffn_local: float  # expert ffn width on this rank: ffn / etp


def routing_imbalance(routed_per_rank: float, ep: int) -> float:
    """Load of the busiest EP rank over the mean, for balanced (aux-loss / bias balanced)
    routing: each of the N = routed_per_rank * ep copies of the group lands on a rank with
    probability 1/ep, so a rank's load is Binomial(N, 1/ep), mean n = routed_per_rank and
    sd sqrt(n (1 - 1/ep)); the expected maximum of the ep loads is the mean plus sd times
    the expected largest of ep standard normals, Blom's (1958) approximation
    Phi^-1((ep - 0.375) / (ep + 0.25)). The slowest rank sets the time: the all-to-all
    synchronises the group. Deviation: the ep loads are treated as independent (they sum to
    N, which makes the maximum slightly smaller), and systematic expert skew beyond sampling
    noise (early training; Lepikhin et al. 2020 GShard §2.2) is not modelled."""
    if ep <= 1 or routed_per_rank <= 0:
        return 1.0
    sd = math.sqrt(routed_per_rank * (1 - 1 / ep))
    z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
    return 1.0 + sd * z / routed_per_rank


def load_factor(t: TrainingSpec, sampled: float) -> float:
    """The busiest expert rank's load over the mean that the step is priced at: the user's
    stated factor (training.moe_imbalance) or balanced routing's sampling spread, capped by
    token dropping (training.moe_capacity_factor C: an expert keeps at most ceil(C x its mean
    tokens), Megatron-Core moe_utils.py get_capacity) and exactly C when every expert's input
    is padded to the capacity (moe_pad_to_capacity: token_dispatcher.py's drop_and_pad sizes
    each expert's buffer, all-to-all split and GEMM at the capacity; megatron-core 0.16.1).
    Deviation: the ceil over a rank's own tokens is not taken (under 1 token per expert)."""
    load = t.moe_imbalance if t.moe_imbalance is not None else sampled
    c = t.moe_capacity_factor
    if c is None:
        return load
    return c if padded_to_capacity(t) else min(load, c)


def padded_to_capacity(t: TrainingSpec) -> bool:
    """Every expert's input padded to the capacity (training.moe_pad_to_capacity with its
    capacity factor): fixed splits and shapes, no host synchronisation per MoE layer."""
    return t.moe_capacity_factor is not None and t.moe_pad_to_capacity


def layout(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig) -> ExpertLayout:
    e = m.moe
    tokens_in = cfg.micro_batch_size * t.seq_length / cfg.cp / (cfg.tp if cfg.sequence_parallel else 1)
    routed = tokens_in * e.top_k
    # after the dispatch an EP rank holds the copies of its ep peers for its E/ep experts,
    # and the expert-TP all-gather multiplies them by etp (dispatch_postprocess)
    received = routed * cfg.etp
    imb = load_factor(t, routing_imbalance(received, cfg.ep))
    local = max(1, e.num_experts // cfg.ep)
    return ExpertLayout(tokens_in, routed, local, received * imb / local, imb, e.ffn_hidden_size / cfg.etp)


def expert_gemms_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, lay: ExpertLayout) -> float:
    """Grouped GEMMs of the local experts (TE grouped GEMM, experts.py TEGroupedMLP): fc1
    (h -> n_up*f/etp) and fc2 (f/etp -> h) for each local expert on its tokens; the GEMM
    shape model takes M = tokens per local expert, so few tokens per expert run at low
    efficiency (compute.gemm_efficiency)."""
    n_up = 2 if m.mlp == MLP_SWIGLU else 1
    h, dt = m.hidden_size, t.dtype
    s = compute.gemm_time_s(gpu, dt, lay.tokens_per_expert, n_up * lay.ffn_local, h, batch=lay.local_experts)
    s += compute.gemm_time_s(gpu, dt, lay.tokens_per_expert, h, lay.ffn_local, batch=lay.local_experts)
    return s


def shared_expert_gemms_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, cfg: ParallelConfig, tokens: float) -> float:
    """Shared experts (DeepSeekMoE, Dai et al. 2024 §3.2; Megatron shared_experts.py): one
    dense MLP of width shared_ffn * num_shared_experts on every token, split over TP like
    the dense MLP (Megatron builds it with the dense TP group)."""
    e = m.moe
    if not e.num_shared_experts:
        return 0.0
    n_up = 2 if m.mlp == MLP_SWIGLU else 1
    fs = e.shared_ffn * e.num_shared_experts
    h, dt = m.hidden_size, t.dtype
    return (compute.gemm_time_s(gpu, dt, tokens, n_up * fs / cfg.tp, h)
            + compute.gemm_time_s(gpu, dt, tokens, h, fs / cfg.tp))


def router_fwd_s(m: TransformerSpec, gpu, t: TrainingSpec, lay: ExpertLayout, act_dt: int) -> float:
    """Router (router.py TopKRouter): the h -> E gating GEMM on every routed token, then the
    memory-bound score function, top-k and the aux-loss statistics over the tokens x E
    scores (fp32, `moe_router_dtype` unset: kept in the activation dtype for the GEMM and
    upcast for the softmax/sigmoid)."""
    e = m.moe
    gemm = compute.gemm_time_s(gpu, t.dtype, lay.tokens_in, e.num_experts, m.hidden_size)
    scores = lay.tokens_in * e.num_experts * (act_dt + 3 * 4)  # read logits, fp32 scores, top-k, aux stats
    return gemm + compute.memory_bound_time_s(gpu, scores, kernels=3)


def permute_fwd_s(m: TransformerSpec, gpu, lay: ExpertLayout, act_dt: int, dispatcher: str | None = None) -> float:
    """Token (un)permutation (moe_utils.py permute / unpermute, fused or not; both
    memory-bound gathers): before the dispatch each rank copies its tokens_in rows into
    `routed` rows ordered by expert, after the combine it gathers them back and sums the
    top_k copies weighted by their probabilities; with more than one local expert the
    received rows are also sorted by local expert after the dispatch and unsorted before
    the combine (sort_chunks_by_idxs). Each pass reads and writes every row once."""
    h = m.hidden_size
    row = act_dt * h + PERMUTE_INDEX_BYTES
    received = lay.tokens_per_expert * lay.local_experts  # rows after the dispatch (and etp gather)
    if dispatcher == DISPATCHER_DEEPEP:
        # DeepEP's dispatch kernel gathers the rows it sends (no permute before it, none after
        # the combine); the receiver permutes the tokens it got into per-expert rows and
        # unpermutes them before the combine (_DeepepManager.get_permuted_hidden_states_by_experts
        # / get_restored_hidden_states_by_experts, token_dispatcher.py, megatron-core 0.16.1)
        return compute.memory_bound_time_s(gpu, 2 * 2 * received * row, kernels=2)
    moved = 2 * 2 * lay.routed * row  # permute + unpermute, read + write
    kernels = 2
    if lay.local_experts > 1:
        moved += 2 * 2 * received * row
        kernels += 2
    return compute.memory_bound_time_s(gpu, moved, kernels=kernels)


def expert_bias_s(m: TransformerSpec, gpu, lay: ExpertLayout, kern: ExpertBias | None) -> tuple[float, float]:
    """(forward, backward) seconds of adding the routed experts' output bias outside the
    expert GEMM, as the engine does it (kernels.ExpertBias; Megatron's
    TEGroupedMLP._apply_bias): memory-bound passes over the busiest rank's received rows x h
    plus the launches of its per-expert loop. Zero without expert biases or where the engine
    fuses the bias into the GEMM (kern None)."""
    if kern is None or m.moe is None or not m.moe.expert_bias:
        return 0.0, 0.0
    elems = lay.tokens_per_expert * lay.local_experts * m.hidden_size
    kf, kb = (lay.local_experts * e + c for e, c in zip(kern.kernels_per_expert, kern.kernels_per_call, strict=True))
    return (compute.memory_bound_time_s(gpu, elems * kern.fwd_bytes, kernels=kf),
            compute.memory_bound_time_s(gpu, elems * kern.bwd_bytes, kernels=kb))


def expert_bias_fwd_s(m: TransformerSpec, gpu, lay: ExpertLayout, kern: ExpertBias | None) -> float:
    """expert_bias_s carried in the forward as launch_overhead_fwd_s carries its launches: a
    block's backward is priced as twice its forward (compute.block_compute), so a third of
    the forward + backward total sits here and the block's step total is exact (a fully
    recomputed block then repeats a third of the total rather than the forward's 28 of 64
    bytes: 0.33 vs 0.44 of it)."""
    fwd, bwd = expert_bias_s(m, gpu, lay, kern)
    return (fwd + bwd) / 3.0


# Kernel launches of one MoE block per micro-batch as Megatron-Core runs the emitted launch
# (planner/launch/megatron.py: --moe-grouped-gemm --moe-token-dispatcher-type alltoall, without
# --moe-permute-fusion / --moe-router-fusion, so the router and the (un)permutation run as one
# kernel per torch op; megatron/core/transformer/moe/ @92c8482e6d, the Megatron-Core of
# Megatron-Bridge 25.11). Counted from the code, forward / backward:
# - router (router.py TopKRouter.routing; moe_utils.py topk_routing_with_score_function,
#   compute_routing_scores_for_aux_loss, switch_load_balancing_loss_func): gating GEMM; score
#   softmax, top-k, the zeros + scatter of the probabilities and of the bool routing map (8);
#   the aux-loss scores again (softmax, top-k, map: 5); the loss (tokens per expert, probability
#   sums, product, sum, scale: 5) and its tracker (2): 21. Backward: the gating GEMM's dgrad and
#   wgrad, softmax, scatter and top-k gradients, the aux-loss scale and sum gradients: 11.
# - dispatcher metadata (token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess, ep > 1):
#   tokens per expert, their all-gather over the EP group, the split sums and the host copies: 8
#   (2 without EP); none in backward.
# - permutation (moe_utils.py permute / unpermute / sort_chunks_by_idxs, unfused): the transposed
#   map, arange, two masked_select (indices, probabilities: nonzero + gather each), index_select;
#   unpermute's zeros + scatter_add: 10; with several local experts the sort and unsort by local
#   expert (split + cat, tokens and probabilities): +3. Backward: index_add into zeros, the
#   unpermute gather, the probabilities' masked_scatter into zeros (5), +2 for the sorts.
# - experts (experts.py TEGroupedMLP -> Transformer Engine GroupedLinear, transformer_engine/
#   pytorch/module/grouped_linear.py @v2.9: general_grouped_gemm issues one cuBLAS GEMM per
#   local expert, tex.split_quantize one fp8 quantize per local expert's input): per local
#   expert fc1 and fc2 forward (2 GEMMs, +2 quantizes in fp8), dgrad and wgrad of both in
#   backward (4 GEMMs, +2 output-gradient quantizes in fp8); a quantize launches 1 kernel
#   (MXFP8) or 3 (current scaling), kernels.Fp8Casts.quantize_kernels.
ROUTER_KERNELS = (21, 11)
# - group-limited routing (moe_utils.py group_limited_topk, --moe-router-num-groups): the
#   per-group top-k and sum, the group top-k, the zeros + scatter of the group mask, its
#   expanded copy and bool cast, the masked_fill, in place of the plain top-k: +8; backward
#   the masked_fill's where: +1.
# - the auxiliary-loss-free expert bias (--moe-router-enable-expert-bias, sigmoid routers:
#   topk_routing_with_score_function): scores + bias for the choice and the gather of the
#   chosen scores, and the tokens-per-expert count its update needs (router.py
#   _maintain_float32_expert_bias / local_tokens_per_expert: sum + add): +4; backward the
#   gather's scatter into zeros: +2.
ROUTER_GROUP_LIMITED_KERNELS = (8, 1)
ROUTER_EXPERT_BIAS_KERNELS = (4, 2)
DISPATCH_METADATA_KERNELS = ((8, 0), (2, 0))  # with EP, without
PERMUTE_KERNELS = (10, 5)
LOCAL_SORT_KERNELS = (3, 2)  # with more than one local expert
EXPERT_GEMMS_PER_EXPERT = (2, 4)
EXPERT_QUANTIZES_PER_EXPERT = (2, 2)  # fp8 only
# kernels the forward terms of this module already charge one launch each: the two grouped
# GEMM calls, the router GEMM and its 3 memory passes, permute_fwd_s's 2 (+2 with local sorts)
_CHARGED_FWD = 2 + 4 + 2
_CHARGED_FWD_LOCAL_SORT = 2


def block_launches(m: TransformerSpec, cfg: ParallelConfig, lay: ExpertLayout, quantize_kernels: int) -> tuple[int, int]:
    """(forward, backward) kernel launches of one MoE block's router, dispatch and experts for
    one micro-batch (the tables above); the shared experts are plain GEMMs (their own term).
    `quantize_kernels`: what one fp8 quantize launches under the run's recipe
    (kernels.Fp8Casts.quantize_kernels: MXFP8 1, TE current scaling 3), 0 without fp8."""
    sort = lay.local_experts > 1
    per_expert = [g + q * quantize_kernels
                  for g, q in zip(EXPERT_GEMMS_PER_EXPERT, EXPERT_QUANTIZES_PER_EXPERT, strict=True)]
    meta = DISPATCH_METADATA_KERNELS[0 if cfg.ep > 1 else 1]
    e = m.moe
    groups = ROUTER_GROUP_LIMITED_KERNELS if e.num_groups else (0, 0)
    bias = ROUTER_EXPERT_BIAS_KERNELS if (e.router_bias and e.score_function == ROUTER_SIGMOID) else (0, 0)
    return tuple(
        ROUTER_KERNELS[i] + groups[i] + bias[i] + meta[i] + PERMUTE_KERNELS[i] + (LOCAL_SORT_KERNELS[i] if sort else 0)
        + lay.local_experts * per_expert[i]
        for i in (0, 1)
    )


def launch_overhead_fwd_s(m: TransformerSpec, gpu, cfg: ParallelConfig, lay: ExpertLayout,
                          quantize_kernels: int) -> float:
    """The launch/tail cost (GPUSpec.kernel_overhead_s per kernel) of the MoE block's kernels
    that the GEMM and memory-pass terms do not charge, carried in the forward: a block's
    backward is priced as twice its forward (compute.block_compute), so a third of the forward
    + backward total sits here and the block's step total is exact. Fine-grained experts make
    it large: per local expert 4 (fp8: 8) forward GEMM and quantize kernels of tens of
    microseconds each, and the router and permutation are a few dozen kernels on a tokens x E
    map of a few MB (the Megatron-Core report on DeepSeek-V3 on GB200 names this kernel
    count the first bottleneck; docs/discussions/deepseek-v3-gb200-optimization/
    deepseek-v3-gb200-optimization.md @eb0783b6d3 section 2)."""
    fwd, bwd = block_launches(m, cfg, lay, quantize_kernels)
    charged = 3 * (_CHARGED_FWD + (_CHARGED_FWD_LOCAL_SORT if lay.local_experts > 1 else 0))
    return max(0, fwd + bwd - charged) * gpu.kernel_overhead_s / 3.0


# The rest of an MoE layer that the host issues between two of the dispatcher's host syncs:
# the attention part of the same TransformerLayer under Megatron-Core's TE spec
# (megatron/core/transformer/transformer_layer.py _forward_attention / _forward_mlp,
# attention.py SelfAttention.forward @92c8482e6d), forward: the input norm and QKV GEMM
# (TELayerNormColumnParallelLinear, 2), q/k norms (2; QK-norm models), RoPE on q and k (2), the
# fused attention (1), the output projection with its fp8 input cast (2), the two
# bias-dropout-adds (2) and the pre-MLP norm (1): 12. Backward: the two projections' dgrad and
# wgrad (4) and output-gradient casts (2), the norms' gradients (4), RoPE (2), attention (2),
# the residual gradients (4): 18. Python-side module overhead is not a kernel; it rides in
# GPUSpec.host_op_s, which is fitted per counted kernel.
LAYER_ATTENTION_KERNELS = (12, 18)
# The overlapped 1F1B (--overlap-moe-expert-parallel-comm) runs each MoE layer as schedule
# nodes (megatron-core 0.16.1 models/common/model_chunk_schedule_plan.py
# TransformerLayerSchedulePlan: attn, moe_dispatch, mlp, moe_combine), each forward a
# ScheduleNode call that waits on and records the micro-batch's CUDA event around a stream
# switch and detaches its inputs, each backward its own autograd run_backward over the node's
# graph, and the delayed weight gradients of mlp and attn their own calls
# (pipeline_parallel/utils.py ScheduleNode._forward / _backward): host work the plain layer
# does not do, counted one host op each: forward 4, backward 4 + 2. Megatron-Bridge measures
# the overlap "flat to mixed" for small-EP alltoall runs, "scheduling overhead is larger than
# the communication being hidden" (docs/training/communication-overlap.md @067f987df).
# Deviation: an autograd call (a hand-off to the engine's thread) costs more than one kernel's
# issue; not measured.
COMBINED_SCHEDULE_HOST_OPS = (4, 6)


def host_issue_s(m: TransformerSpec, gpu, cfg: ParallelConfig, lay: ExpertLayout,
                 quantize_kernels: int) -> tuple[float, float]:
    """(forward, backward) seconds the host takes to issue one MoE layer's kernels for one
    micro-batch (block_launches plus LAYER_ATTENTION_KERNELS, GPUSpec.host_op_s each).

    Megatron-Core's alltoall dispatcher copies the token counts to the host in every MoE
    layer's forward and synchronises (token_dispatcher.py MoEAlltoAllTokenDispatcher.
    preprocess -> _maybe_dtoh_and_synchronize @92c8482e6d): the GPU's queue drains there,
    so the CPU cannot run ahead by more than one layer, and a layer whose kernels the CPU
    issues more slowly than the GPU runs them takes the CPU's time. NVIDIA names this the
    biggest performance issue of fine-grained MoE in FP8 (Megatron-LM docs/discussions/
    deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md @eb0783b6d3 section 2:
    "the CPU kernel launch speed cannot keep up with the kernel execution speed on GPU ...
    host boundedness"; the device-host sync for the tokens per expert is why the whole
    model cannot be graph-captured, ibid. section 4). The Megatron-Bridge recipes answer it
    with CUDA graphs of the router and preprocessing, which the emitted launch does not use.
    layers._block_cost takes the larger of this and the layer's device time. Under the
    overlapped 1F1B the schedule nodes' own host work is added (COMBINED_SCHEDULE_HOST_OPS)."""
    fwd, bwd = block_launches(m, cfg, lay, quantize_kernels)
    fwd += LAYER_ATTENTION_KERNELS[0]
    bwd += LAYER_ATTENTION_KERNELS[1]
    if cfg.moe_a2a_overlap and cfg.ep > 1:
        fwd += COMBINED_SCHEDULE_HOST_OPS[0]
        bwd += COMBINED_SCHEDULE_HOST_OPS[1]
    return fwd * gpu.host_op_s, bwd * gpu.host_op_s


def _a2a_levels_s(cluster: ClusterSpec, nbytes: float, ep: int, etp: int, fits) -> float:
    """One all-to-all of `nbytes` sent per rank over an EP group of `ep` ranks `etp` apart:
    comm.all_to_all_s, which splits a rank's peers into those on its NVLink domain and the
    rest when the group spans domains (DeepSeek-V3 §3.2.2 describes the same two levels)."""
    return comm.all_to_all_s(nbytes, ep, comm.group_link(cluster, ep, etp), fits)


def ep_comm_fwd_s(m: TransformerSpec, cluster: ClusterSpec, cfg: ParallelConfig, lay: ExpertLayout, act_dt: int,
                  fits) -> float:
    """Forward expert communication of one MoE block: the dispatch and combine all-to-alls
    of the routed copies (token_dispatch / token_combine, activation dtype: no fp8
    dispatch at this commit), the routing probabilities with the dispatch (fp32), and with
    etp > 1 the expert-TP all-gather of the received tokens and reduce-scatter of the
    expert outputs (dispatch_postprocess / combine_preprocess). The busiest rank's load
    (imbalance) sets the time. Backward sends the same volumes again (the gradients of both
    all-to-alls and of the gather), so a block costs 2x this."""
    if cfg.moe_dispatcher == DISPATCHER_DEEPEP:
        return deepep_comm_fwd_s(m, cluster, cfg, lay, act_dt)
    h = m.hidden_size
    tok_bytes = lay.routed * act_dt * h * lay.imbalance
    prob_bytes = lay.routed * 4
    a2a = 2 * _a2a_levels_s(cluster, tok_bytes, cfg.ep, cfg.etp, fits) + _a2a_levels_s(
        cluster, prob_bytes, cfg.ep, cfg.etp, fits)
    if cfg.etp > 1:
        link = comm.group_link(cluster, cfg.etp, 1)
        gathered = tok_bytes * cfg.etp
        a2a += comm.all_gather_s(gathered, cfg.etp, link, fits) + comm.reduce_scatter_s(gathered, cfg.etp, link, fits)
    return a2a


# --------------------------------------------------------------------------- DeepEP dispatcher

def expected_distinct_bins(num_experts: int, top_k: int, bin_experts: int, num_groups: int = 0,
                           group_top_k: int = 0) -> float:
    """Expected number of distinct bins (runs of `bin_experts` consecutive experts: one
    rank's local experts, or one node's) among one token's top_k experts, under balanced
    routing: the token's `group_top_k` groups are a uniform draw of num_groups consecutive
    groups (DeepSeek-V3 §2.1.2 node-limited routing; num_groups 0 = no groups), and every
    selected group receives at least one of the k experts (a group is selected for the scores
    of its best experts, which then rank among the token's top k); the rest are uniform over
    the selected groups' experts. Bins smaller than a group: each of the g*E/G/bin bins is
    missed with probability C(pool - bin, k) / C(pool, k) (hypergeometric; the at-least-one
    rule is not applied inside a group, which undercounts the ranks hit by ~1-2% for
    DeepSeek-V3); bins of one or more whole groups: hit exactly when they hold a selected
    group. A bin size that neither divides nor is a multiple of the group size is priced
    without the group limit (an upper bound)."""
    e, k, b = num_experts, top_k, bin_experts
    groups, g = (num_groups, group_top_k) if num_groups > 1 and group_top_k > 0 else (1, 1)
    size = e // groups
    if size % b and b % size:
        groups, g, size = 1, 1, e
    if b < size or groups == 1:
        pool = g * size
        kk = min(k, pool)
        miss = math.comb(pool - b, kk) / math.comb(pool, kk)
        return (pool // b) * (1.0 - miss)
    per_bin = b // size  # groups per bin
    return (e // b) * (1.0 - math.comb(groups - per_bin, g) / math.comb(groups, g))


def deepep_group_nodes(cluster: ClusterSpec, cfg: ParallelConfig) -> int:
    """Nodes one DeepEP group (the etp x ep ranks of token_dispatcher.py's tp_ep_group)
    spans: 1 within a node, else size / 8 (DeepEP's internode mode)."""
    size = cfg.ep * cfg.etp
    return 1 if size <= min(DEEPEP_NVL_PEERS, cluster.gpus_per_node) else size // DEEPEP_NVL_PEERS


def deepep_comm_fwd_s(m: TransformerSpec, cluster: ClusterSpec, cfg: ParallelConfig, lay: ExpertLayout,
                      act_dt: int) -> float:
    """Forward dispatch + combine of one MoE block through DeepEP's normal (high-throughput)
    kernels (Megatron-Core `flex` dispatcher, backend deepep: token_dispatcher.py
    _DeepepManager, fused_a2a.py; deepseek-ai/DeepEP README, DeepSeek-V3 §3.2.2). A token is
    sent once to every rank holding one of its experts (the routing map is expanded over the
    etp ranks of each expert rank, MoEFlexTokenDispatcher._initialize_metadata), and between
    nodes once per destination node, to the GPU of the same local rank, which forwards it over
    NVLink: per token the network carries D_node (1 - 1/N) copies and NVLink D_rank etp
    (1 - 1/min(8, group)) (expected_distinct_bins; the own node is hit with probability D_node
    / N by symmetry). The two links run at once (DeepEP pipelines RDMA and NVLink chunks): the
    slower sets the time. The combine sends the same bytes back (per node, reduced over the
    node's ranks). bf16 both ways as Megatron calls it (no fp8 dispatch); the top-k indices
    and weights riding with each token (~100 B) are not counted. The busiest rank's load
    (imbalance) sets the time; backward sends the same again (a block costs 2x this).
    Deviation: the block's kernel launches and host work keep the alltoall dispatcher's
    counts (block_launches, host_issue_s); DeepEP's own were not counted from its source."""
    e = m.moe
    group = cfg.ep * cfg.etp
    if group <= 1:
        return 0.0
    local = max(1, e.num_experts // cfg.ep)
    tok_bytes = lay.tokens_in * act_dt * m.hidden_size * lay.imbalance
    ranks_hit = expected_distinct_bins(e.num_experts, e.top_k, local, e.num_groups, e.group_top_k) * cfg.etp
    nodes = deepep_group_nodes(cluster, cfg)
    nvl_peers = min(group, DEEPEP_NVL_PEERS)
    nvl = comm.group_link(cluster, nvl_peers, 1)
    t_nvl = tok_bytes * ranks_hit * (1.0 - 1.0 / nvl_peers) / nvl.bandwidth_bytes_s + (nvl_peers - 1) * nvl.latency_s
    if nodes <= 1:
        return 2.0 * t_nvl
    net = comm.group_link(cluster, group, 1)
    # each GPU sends to the GPU of its own local rank in the other nodes (one rail), at its
    # share of the node's NICs (comm.Link.member_rail_bytes_s)
    node_experts = local * (DEEPEP_NVL_PEERS // cfg.etp)
    nodes_hit = expected_distinct_bins(e.num_experts, e.top_k, node_experts, e.num_groups, e.group_top_k)
    t_net = tok_bytes * nodes_hit * (1.0 - 1.0 / nodes) / net.member_rail_bytes_s + (nodes - 1) * net.latency_s
    return 2.0 * max(t_nvl, t_net)


def _deepep_config_bytes(hidden_bytes: int, group: int, nvl_chunk_recv: int, rdma_chunk_recv: int) -> tuple[int, int]:
    """(NVLink, RDMA) buffer bytes of one DeepEP config (csrc/legacy/config.hpp
    get_nvl_buffer_size_hint / get_rdma_buffer_size_hint @dd758ca; SourceMeta 8 bytes,
    topk_idx_t int64, kNumMaxTopK = kNumMaxScales = 128, two SMs per channel)."""
    channels = DEEPEP_NUM_SMS // 2
    rdma_ranks = max(group // DEEPEP_NVL_PEERS, 1)
    nvl_ranks = min(group, DEEPEP_NVL_PEERS)
    per_token = hidden_bytes + 8 + 128 * 8 + 128 * 4 + 128 * 4
    nvl = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4 + channels * nvl_ranks * nvl_chunk_recv * per_token
    if group <= DEEPEP_NVL_PEERS:
        return nvl, 0
    rdma = (channels * rdma_ranks * (DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4
            + channels * rdma_ranks * rdma_chunk_recv * (per_token + 16) * 2)
    return nvl, rdma




def deepep_buffer_bytes(m: TransformerSpec, cfg: ParallelConfig) -> float:
    """Bytes of the DeepEP Buffer each rank allocates once (Megatron-Core fused_a2a.py
    get_buffer: the larger of the dispatch and combine configs' NVLink and RDMA size hints for
    hidden * max(element size, 2) bytes per token), outside torch's caching allocator: the
    NVLink part cudaMalloc'd, the RDMA part (internode groups) in NVSHMEM's heap, whole
    512 MiB chunks with NVSHMEM's own 256 MiB. Memory a plan with the deepep dispatcher holds
    on every GPU."""
    if cfg.moe_dispatcher != DISPATCHER_DEEPEP or m.moe is None:
        return 0.0
    group = cfg.ep * cfg.etp
    recv = DEEPEP_RECV_TOKENS.get(group)
    if recv is None:
        return 0.0
    hidden_bytes = m.hidden_size * 2
    sizes = [_deepep_config_bytes(hidden_bytes, group, n, r) for n, r in recv]
    nvl, rdma = max(s[0] for s in sizes), max(s[1] for s in sizes)
    if rdma:
        # the RDMA buffer lives in NVSHMEM's symmetric heap, which DeepEP maps in chunks of
        # NVSHMEM_CUMEM_GRANULARITY = 2**29 bytes and which needs "at least 256 MiB" for
        # NVSHMEM's own initialisation (deep_ep/buffers/legacy.py @dd758ca): counted as whole
        # 512 MiB chunks holding both
        rdma = math.ceil((rdma + DEEPEP_NVSHMEM_INIT_BYTES) / DEEPEP_NVSHMEM_CHUNK_BYTES) * DEEPEP_NVSHMEM_CHUNK_BYTES
    return float(nvl + rdma)


# --------------------------------------------------------------------------- overlapped 1F1B


@dataclass(frozen=True)
class PassParts:
    """One MoE block's forward or backward for one micro-batch, split as Megatron-Core's
    fine-grained schedule splits it into nodes (megatron/core/models/gpt/
    fine_grained_callables.py, megatron-core 0.16.1): `attn` (attention, its TP / CP
    collectives, router, permutation and shared experts: submodule_attn_forward), `mlp` (the
    routed experts: submodule_moe_forward), `dispatch` and `combine` (the all-to-alls and the
    expert-TP gather / reduce-scatter, on the communication stream). In a backward, `attn` and
    `mlp` are the input-gradient parts and `attn_wgrad` / `mlp_wgrad` the weight-gradient
    parts (backward_dw runs them)."""

    attn: float
    mlp: float
    dispatch: float
    combine: float
    attn_wgrad: float = 0.0
    mlp_wgrad: float = 0.0

    @property
    def alone_s(self) -> float:
        return self.attn + self.mlp + self.dispatch + self.combine + self.attn_wgrad + self.mlp_wgrad


# layers of the chain simulated by combined_pair_s: the steady per-layer time is the
# difference of the ends after PAIR_CHAIN_LAYERS and after one layer, per layer between
PAIR_CHAIN_LAYERS = 4


def combined_pair_s(f: PassParts, b: PassParts, interference: float) -> float:
    """Seconds one layer of a combined forward (f) and backward (b) step takes in Megatron-
    Core's overlapped 1F1B, steady state of a chain of such layers. The order is the
    engine's (TransformerLayerSchedulePlan.run, megatron/core/models/common/
    model_chunk_schedule_plan.py, megatron-core 0.16.1):
        comm stream: combine_bwd | dispatch_fwd -> dispatch_bwd      | combine_fwd
        comp stream: attn_fwd    | mlp_bwd -> mlp_bwd_dw -> mlp_fwd  | attn_bwd (-> attn_bwd_dw)
    each node waiting for its input: mlp_bwd for combine_bwd, dispatch_fwd for attn_fwd,
    dispatch_bwd for mlp_bwd's input gradient, mlp_fwd for dispatch_fwd, combine_fwd for
    mlp_fwd, attn_bwd for dispatch_bwd, and the next layer's attn_fwd for this combine_fwd,
    its combine_bwd for this attn_bwd's input gradient. Each stream runs its nodes in that
    order (earliest start). The communication hidden under compute still slows it by
    `interference` x the hidden part (GPUSpec.overlap_interference, the rule of
    layers.overlapped_s). Deviation: the SM share the all-to-all kernels take is that one
    constant, not a per-kernel model."""

    def chain(n: int) -> float:
        comp = comm = 0.0  # when each stream is free
        f_in = b_in = 0.0  # when this layer's forward input / backward input gradient is ready
        for _ in range(n):
            cb = max(comm, b_in) + b.combine
            comm = cb
            af = max(comp, f_in) + f.attn
            mbd = max(af, cb) + b.mlp
            df = max(comm, af) + f.dispatch
            mbw = mbd + b.mlp_wgrad
            db = max(df, mbd) + b.dispatch
            mf = max(mbw, df) + f.mlp
            cf = max(db, mf) + f.combine
            abd = max(mf, db) + b.attn
            comp = abd + b.attn_wgrad
            comm = cf
            f_in, b_in = cf, abd
        return max(comp, comm)

    per_layer = (chain(PAIR_CHAIN_LAYERS) - chain(1)) / (PAIR_CHAIN_LAYERS - 1)
    compute = f.attn + f.mlp + b.attn + b.mlp + b.attn_wgrad + b.mlp_wgrad
    comm = f.dispatch + f.combine + b.dispatch + b.combine
    hidden = max(0.0, min(comm, compute + comm - per_layer))
    return per_layer + interference * hidden


def combined_saving_s(f: PassParts, b: PassParts, interference: float) -> float:
    """What running this layer's forward and backward as one combined step saves over running
    them apart (the all-to-alls exposed): never negative, never more than the all-to-alls."""
    comm = f.dispatch + f.combine + b.dispatch + b.combine
    return min(comm, max(0.0, f.alone_s + b.alone_s - combined_pair_s(f, b, interference)))
