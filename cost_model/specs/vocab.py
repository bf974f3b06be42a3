"""The project's vocabulary: every closed set of words a request, a plan, the CLI, the cost
model or the runtime uses, defined once as a `Literal` alias.

`typing.get_args(Alias)` is the single list of allowed values (torchtitan's
`job_config.py` does the same): pydantic validates against the alias, argparse takes
`choices=values(Alias)`, and code compares against the constants below instead of
re-typing the strings. Adding a word here adds it everywhere; nothing else lists them
(bench/vocab_literals.py counts the string literals that re-type one). An engine's own flag
or config word that happens to equal ours lives in that engine's table,
planner/launch/data/<engine>_words.toml.
"""

from __future__ import annotations

from typing import Literal, get_args

# --------------------------------------------------------------------------- training
Dtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]  # any tensor dtype the model prices
TrainDtype = Literal["bf16", "fp16", "fp8", "fp32"]  # training.dtype (compute precision)
Optimizer = Literal["adam", "adamw", "sgd"]
Attention = Literal["flash", "eager"]  # flash: O(s) memory; eager: s^2 scores stored
# Transformer Engine's FP8 scaling (Megatron --fp8-recipe): per-tensor current scaling, or
# MXFP8 (one E8M0 scale per 32 elements; Blackwell tensor cores, sm 10.x)
Fp8Recipe = Literal["tensorwise", "mxfp8"]

# --------------------------------------------------------------------------- model
Mlp = Literal["gelu", "swiglu"]
Norm = Literal["layernorm", "rmsnorm"]
Position = Literal["learned", "rope"]
ModelKind = Literal["transformer", "layers"]
# attention projections of the grouped `transformer.attention` block (DESIGN.md's request)
AttentionKind = Literal["mha", "gqa", "mla"]
# per-block attention kind (Hugging Face `layer_types`)
AttentionLayer = Literal["full_attention", "sliding_attention", "chunked_attention"]
# MoE router score function (Megatron-Core moe_router_score_function; HF DeepSeek-V3 scoring_func)
RouterScore = Literal["softmax", "sigmoid"]

# --------------------------------------------------------------------------- parallelism
Recompute = Literal["none", "selective", "full"]
# zb1p, zbv, dualpipev: the zero-bubble family, backward split into input-gradient (B) and
# weight-gradient (W) work (torch.distributed.pipelining ScheduleInterleavedZeroBubble,
# ScheduleZBVZeroBubble, ScheduleDualPipeV; cost_model/pipeline/order.py)
Schedule = Literal["gpipe", "1f1b", "interleaved", "zb1p", "zbv", "dualpipev"]
ZeroStage = Literal[0, 1, 2, 3]
# which per-stage full-recompute counts an engine can run (cost_model/engines/support.py EngineSupport)
StageCounts = Literal["any", "uniform", "none"]
# which (virtual) pipeline stages an engine lets hold no transformer block, only the embedding
# or only the loss (cost_model/engines/support.py EngineSupport.empty_chunks): any, the first and the
# last ("ends"), or none
EmptyChunks = Literal["any", "ends", "none"]

# --------------------------------------------------------------------------- launch
Engine = Literal["megatron", "torchtitan", "deepspeed", "runtime"]
# context-parallel communication (Megatron-Core `--cp-comm-type`), priced by cp.block_cp_s
CpComm = Literal["p2p", "all_gather", "a2a", "a2a+p2p"]
# MoE token dispatcher (Megatron-Core): "alltoall" (`--moe-token-dispatcher-type alltoall`, one
# NCCL all-to-all per routed copy) or "deepep" (`--moe-token-dispatcher-type flex
# --moe-flex-dispatcher-backend deepep`, DeepEP's fused kernels that send a token once per
# destination rank and once per destination node); priced by moe.ep_comm_fwd_s
MoeDispatcher = Literal["alltoall", "deepep"]
# activation offload (Megatron-Core --fine-grained-activation-offloading --offload-modules):
# "none"; "attn": core_attn attn_proj (the core attention's saved q, k, v and output, and the
# output projection's input, the same output); "attn_qkv": qkv_linear core_attn attn_proj (also
# the fused norm + QKV linear's saved input and normalised input); MoE models only: "moe":
# expert_fc1 moe_act (the routed experts' grouped fc1 input and their activation's input, the
# fc1 output); "attn_moe": core_attn attn_proj expert_fc1 moe_act. engines/offload.py
# ACT_OFFLOAD_MODULES names the modules, terms/act_offload.py prices them
ActivationOffload = Literal["none", "attn", "attn_qkv", "moe", "attn_moe"]
Target = Literal["megatron", "torchtitan", "deepspeed", "torchrun", "slurm", "kubernetes", "trainjob", "ranks", "runtime"]

# --------------------------------------------------------------------------- profile
LayerKind = Literal["block", "moe_block", "embedding", "logits"]
LinkLevel = Literal["intra", "inter"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
SolverStatus = Literal["optimal", "feasible"]
# the logits + cross-entropy implementation an engine runs (cost_model/terms/transients.py)
LossKernel = Literal["torch", "torch_loss_parallel", "megatron", "megatron_fused", "te", "fp32_runtime", "torch_compiled"]

# Named members, so code says `RECOMPUTE_FULL` and never re-types the word.
(RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL) = get_args(Recompute)
(SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED, SCHEDULE_ZB1P, SCHEDULE_ZBV, SCHEDULE_DUALPIPEV) = get_args(Schedule)
# the schedules that run the weight-gradient work apart from the input-gradient work
SPLIT_BACKWARD_SCHEDULES: tuple[str, ...] = (SCHEDULE_ZB1P, SCHEDULE_ZBV, SCHEDULE_DUALPIPEV)
# the V-shaped ones: two chunks per rank, stage r and 2pp-1-r on rank r (torch
# pipelining/_utils.py generate_stage_to_rank_mapping style="v")
V_SCHEDULES: tuple[str, ...] = (SCHEDULE_ZBV, SCHEDULE_DUALPIPEV)
(MLP_GELU, MLP_SWIGLU) = get_args(Mlp)
(NORM_LAYERNORM, NORM_RMSNORM) = get_args(Norm)
(POSITION_LEARNED, POSITION_ROPE) = get_args(Position)
(ATTENTION_FLASH, ATTENTION_EAGER) = get_args(Attention)
(DTYPE_FP32, DTYPE_TF32, DTYPE_BF16, DTYPE_FP16, DTYPE_FP8) = get_args(Dtype)
(OPTIMIZER_ADAM, OPTIMIZER_ADAMW, OPTIMIZER_SGD) = get_args(Optimizer)
(ENGINE_MEGATRON, ENGINE_TORCHTITAN, ENGINE_DEEPSPEED, ENGINE_RUNTIME) = get_args(Engine)
(KIND_BLOCK, KIND_MOE_BLOCK, KIND_EMBEDDING, KIND_LOGITS) = get_args(LayerKind)
(LEVEL_INTRA, LEVEL_INTER) = get_args(LinkLevel)
(MODEL_TRANSFORMER, MODEL_LAYERS) = get_args(ModelKind)
(ATTN_FULL, ATTN_SLIDING, ATTN_CHUNKED) = get_args(AttentionLayer)
(ATTN_MHA, ATTN_GQA, ATTN_MLA) = get_args(AttentionKind)
(FP8_TENSORWISE, FP8_MXFP8) = get_args(Fp8Recipe)
(ROUTER_SOFTMAX, ROUTER_SIGMOID) = get_args(RouterScore)
(STATUS_OPTIMAL, STATUS_FEASIBLE) = get_args(SolverStatus)
(COUNTS_ANY, COUNTS_UNIFORM, COUNTS_NONE) = get_args(StageCounts)
(EMPTY_ANY, EMPTY_ENDS, EMPTY_NONE) = get_args(EmptyChunks)
(CP_P2P, CP_ALL_GATHER, CP_A2A, CP_A2A_P2P) = get_args(CpComm)
(DISPATCHER_ALLTOALL, DISPATCHER_DEEPEP) = get_args(MoeDispatcher)
(ACT_OFFLOAD_NONE, ACT_OFFLOAD_ATTN, ACT_OFFLOAD_ATTN_QKV, ACT_OFFLOAD_MOE, ACT_OFFLOAD_ATTN_MOE) = get_args(
    ActivationOffload)
(
    TARGET_MEGATRON, TARGET_TORCHTITAN, TARGET_DEEPSPEED, TARGET_TORCHRUN, TARGET_SLURM,
    TARGET_KUBERNETES, TARGET_TRAINJOB, TARGET_RANKS, TARGET_RUNTIME,
) = get_args(Target)
(ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SEND_RECV) = get_args(Collective)
(
    LOSS_TORCH, LOSS_TORCH_PARALLEL, LOSS_MEGATRON, LOSS_MEGATRON_FUSED, LOSS_TE, LOSS_FP32_RUNTIME,
    LOSS_TORCH_COMPILED,
) = get_args(LossKernel)

# The fused-attention kernel an engine runs (engines/kernels.py says which engine runs which):
# cuDNN / FlashAttention-3 class (GPUSpec.attention_efficiency), or PyTorch SDPA's flash
# backend = FlashAttention-2 (GPUSpec.sdpa_attention_efficiency)
AttentionKernel = Literal["fused", "sdpa"]
ATTN_FUSED, ATTN_SDPA = get_args(AttentionKernel)

DTYPE_BYTES: dict[str, int] = dict(zip(get_args(Dtype), (4, 4, 2, 2, 1), strict=True))


def values(alias) -> tuple:
    """The allowed values of a Literal alias, in definition order (CLI choices, messages)."""
    return get_args(alias)

