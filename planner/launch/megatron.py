"""Megatron-LM pretrain_gpt.py arguments, launched by torchrun (one process per GPU).

Targets Megatron-LM main at the commit in data/megatron_flags.txt (flag names) with
megatron-core 0.16.1 (TransformerConfig, parallel_state): tests/engines feed the arguments to
megatron-core's TransformerConfig and build the groups with initialize_model_parallel.

Environment: CUDA_DEVICE_MAX_CONNECTIONS=1 when tp > 1 or cp > 1 and no Megatron-FSDP (torchrun.env): Megatron's
TP/SP/CP overlap relies on one hardware queue so communication kernels are issued ahead of the
compute they overlap with (megatron/core/tensor_parallel/layers.py comments), and
megatron/training/arguments.py validate_args refuses tp/cp > 1 without it on GPUs before
Blackwell ("Using tensor model parallelism or context parallelism require setting the
environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"); 8 with the overlapped 1F1B
all-to-all (--overlap-moe-expert-parallel-comm), whose communication stream runs beside the
compute stream (megatron/core/transformer/moe/README.md: "CUDA_DEVICE_MAX_CONNECTIONS > 1";
validate_args then only warns about tp/cp > 1 before Blackwell, and the plan still prices
TP's backward collectives under the weight-gradient GEMMs there: a deviation).
Overlap: the cost model hides the DP gradient sync behind the last backward
(cost_model/pipeline/stages.py), which Megatron does with --overlap-grad-reduce; with the distributed
optimizer the parameter all-gather overlaps the next forward (--overlap-param-gather, which
megatron/training/arguments.py accepts only with --use-distributed-optimizer and
--overlap-grad-reduce). TP: --tp-comm-overlap exactly where the cost model prices the TP
collectives under the GEMMs (cost_model/engines/support.py tp_comm_overlap: tp > 1, sequence
parallelism, the TP group on one node; Transformer Engine layers, Megatron's default
--transformer-impl).
Gradients: --grad-reduce-in-bf16 when the plan's training.grad_dtype is bf16 (Megatron's
default for --bf16 is fp32 main grads, megatron/training/arguments.py validate_args); the cost
model prices the grad buffer and its reduce-scatter in that dtype.
"""

from __future__ import annotations

from cost_model.engines.offload import ACT_OFFLOAD_MODULES, LAYER_OFFLOAD_FLAG
from cost_model.engines.support import engine_supports, tp_comm_overlap
from cost_model.model import attention, flops
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    ATTN_CHUNKED,
    ATTN_FULL,
    ATTN_SLIDING,
    CP_A2A_P2P,
    CP_P2P,
    DISPATCHER_DEEPEP,
    DTYPE_BF16,
    DTYPE_FP8,
    ENGINE_MEGATRON,
    FP8_MXFP8,
    FP8_TENSORWISE,
    MLP_SWIGLU,
    NORM_RMSNORM,
    OPTIMIZER_ADAM,
    POSITION_LEARNED,
    POSITION_ROPE,
    RECOMPUTE_FULL,
    RECOMPUTE_SELECTIVE,
    ROUTER_SIGMOID,
    ROUTER_SOFTMAX,
    SCHEDULE_GPIPE,
    SPLIT_BACKWARD_SCHEDULES,
    TARGET_MEGATRON,
)
from planner.launch import data
from planner.launch._common import (
    NotApplicable,
    join,
    par,
    require_transformer,
    stage_sizes,
    world_size,
)
from planner.launch.process import env, launcher

FLAGS_FILE = "megatron_flags.txt"

# fp8: the plan's training.fp8_recipe, the scaling the cost model priced (cost_model/engines/kernels.py
# fp8_recipe: MXFP8 on Blackwell, else Transformer Engine's per-tensor current scaling;
# Megatron's own default --fp8-recipe is delayed), emitted explicitly
_WORDS = data.words(ENGINE_MEGATRON)  # our word -> Megatron's (data/megatron_words.toml)
_DTYPE = _WORDS["dtype"]
_FP8_RECIPE = _WORDS["fp8_recipe"]


def pipeline_layout(plan: dict) -> tuple[list[str], list[str]]:
    """Flags that reproduce the plan's stage boundaries, and notes.

    Megatron offers three ways, tried from simplest to most general:
      * even split: nothing, or --num-virtual-stages-per-pipeline-rank for VPP;
      * --decoder-first/last-pipeline-num-layers: first/last pp rank differ, but every
        middle rank must hold the same count, and with VPP every rank's layers are split
        evenly over its virtual chunks (TransformerConfig.__post_init__ checks both);
      * --pipeline-model-parallel-layout "Et*9|t*10|...|t*9L": any split (stage k of the
        string sits on pp rank k % pp, like the plan's stages). It excludes the VPP flags.
    """
    p = par(plan)
    pp, vpp = p["pp"], p["vpp"]
    sizes = stage_sizes(plan)
    vflags = ["--num-virtual-stages-per-pipeline-rank", str(vpp)] if vpp > 1 else []
    if pp == 1 and vpp == 1:
        return [], []
    if len(sizes) != pp * vpp:
        return vflags, [f"plan has {len(sizes)} stages, expected pp*vpp={pp * vpp}; using Megatron's even split"]
    per_rank = [[sizes[c * pp + r] for c in range(vpp)] for r in range(pp)]
    uniform = [len(set(chunks)) == 1 for chunks in per_rank]
    if len(set(sizes)) == 1:
        return vflags, []
    middle = per_rank[1:-1]
    middle_ok = all(uniform[1:-1]) and len({c[0] for c in middle}) <= 1
    if uniform[0] and uniform[-1] and middle_ok and pp > 1:
        first, last = per_rank[0][0] * vpp, per_rank[-1][0] * vpp
        mid = middle[0][0] * vpp if middle else None
        flags = []
        if mid is None or first != mid:
            flags += ["--decoder-first-pipeline-num-layers", str(first)]
        if mid is None or last != mid:
            flags += ["--decoder-last-pipeline-num-layers", str(last)]
        if first > 0 and last > 0:
            return flags + vflags, []
    # General case: an explicit layout string (E = embedding, t = block, m = MTP layer, L =
    # loss/output; the MTP layers on the last stage, before the loss, as priced).
    mtp = "m" * int((plan.get("model") or {}).get("num_nextn_predict_layers") or 0)
    parts = []
    for k, n in enumerate(sizes):
        body = f"t*{n}" if n > 1 else "t" * n
        parts.append(("E" if k == 0 else "") + body + (mtp + "L" if k == len(sizes) - 1 else ""))
    note = "uneven stages beyond first/last: expressed with --pipeline-model-parallel-layout"
    return ["--pipeline-model-parallel-layout", "|".join(parts)], [note]


def recompute(plan: dict) -> tuple[list[str], list[str]]:
    """Recompute flags, and notes where the plan's per-stage counts cannot be expressed.

    Megatron-LM main (d98e8a64, megatron/core/recompute.py checkpointed_forward, called per
    TransformerBlock, i.e. per virtual stage): with --recompute-method block the first
    --recompute-num-layers blocks of *every* virtual stage are recomputed, so stage k recomputes
    min(n, size_k) blocks. One n reproduces the plan exactly only when every stage's count equals
    min(n, size_k) for the same n; otherwise the largest count is used (no stage recomputes less
    than planned: memory stays within the plan) and the note lists what each stage does.
    """
    p = par(plan)
    mode = p["recompute"]
    if mode == RECOMPUTE_SELECTIVE:
        return ["--recompute-granularity", _WORDS["recompute_granularity"][RECOMPUTE_SELECTIVE]], []
    if mode != RECOMPUTE_FULL:
        return [], []
    per_stage = [int(s.get("recompute_layers") or 0) for s in plan.get("stages") or []]
    sizes = stage_sizes(plan)
    n = max(per_stage, default=0)
    if n == 0:
        # No per-stage count: recompute every block of a stage (uniform, one block per unit).
        return ["--recompute-granularity", _WORDS["recompute_granularity"][RECOMPUTE_FULL], "--recompute-method", _WORDS["recompute_method"]["all_blocks"], "--recompute-num-layers", "1"], []
    notes = []
    runs = [min(n, s) for s in sizes]
    if runs != per_stage:
        notes.append(
            f"plan recomputes {per_stage} blocks per virtual stage; Megatron's --recompute-num-layers "
            f"applies one count to every virtual stage: emitted {n}, so the stages recompute {runs}"
        )
    return ["--recompute-granularity", _WORDS["recompute_granularity"][RECOMPUTE_FULL], "--recompute-method", _WORDS["recompute_method"]["first_blocks"], "--recompute-num-layers", str(n)], notes


def moe_layer_pattern(num_layers: int, moe: dict) -> str | None:
    """--moe-layer-freq value: None for all-MoE, an int string, or a '[0]*k+[1]*m' pattern."""
    freq = int(moe.get("layer_freq") or 1)
    dense = int(moe.get("first_dense_layers") or 0)
    listed = moe.get("moe_layers")
    if dense == 0 and listed is None:
        return None if freq == 1 else str(freq)
    if listed is not None:  # the MoE blocks named one by one (MoESpec.moe_layers)
        bits = [1 if i in set(listed) else 0 for i in range(num_layers)]
    else:
        bits = [0 if i < dense or (i % freq) != 0 else 1 for i in range(num_layers)]
    return bit_pattern(bits)


def bit_pattern(bits: list[int]) -> str:
    """A per-block 0/1 list as the Python list expression Megatron's moe_freq_type evaluates
    (--moe-layer-freq, --window-attn-skip-freq): a repeated period, '[1,0]*18', else runs,
    '[0]*k+[1]*m'."""
    n = len(bits)
    for k in range(1, min(8, n // 2) + 1):
        if n % k == 0 and bits == bits[:k] * (n // k) and len(set(bits)) > 1:
            return f"[{','.join(map(str, bits[:k]))}]*{n // k}"
    runs: list[list[int]] = []
    for b in bits:
        if runs and runs[-1][0] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    return "+".join(f"[{b}]*{n}" for b, n in runs)


def _attention_kinds(model: dict) -> list[str]:
    """Each block's attention kind, as the cost model reads it (attention.layer_type_of)."""
    types = model.get("layer_types")
    return [attention.layer_type_of(types, model.get("sliding_window"), i) for i in range(int(model["num_layers"]))]


def _has_dense_mlp(model: dict) -> bool:
    """Whether some block has a dense MLP (or the MoE blocks shared experts), which Megatron's
    --disable-bias-linear covers as well."""
    moe = model.get("moe")
    if not moe:
        return True
    if int(moe.get("num_shared_experts") or 0):
        return True
    return moe_layer_pattern(int(model["num_layers"]), moe) is not None


def linear_biases(model: dict) -> dict[str, bool]:
    """The model's linear biases, resolved as the cost model counts them (attention.biases_of,
    flops.mlp_biased_of: None means only GPT-style LayerNorm models have them): qkv, the
    attention output, the dense MLPs and shared experts, the routed experts."""
    qkv, out = attention.biases_of(model.get("norm"), model.get("qkv_bias"), model.get("out_proj_bias"))
    b = {"qkv": bool(qkv), "attention output": bool(out)}
    if _has_dense_mlp(model):
        b["MLP"] = bool(flops.mlp_biased_of(model.get("norm"), model.get("mlp_bias")))
    moe = model.get("moe")
    if moe:
        b["experts"] = bool(moe.get("expert_bias"))
        # a softmax router's bias is its Linear's (GPT-OSS); a sigmoid router's is the
        # auxiliary-loss-free expert bias, a buffer (router_args), its Linear unbiased
        b["router"] = bool(moe.get("router_bias")) and moe.get("score_function", ROUTER_SOFTMAX) == ROUTER_SOFTMAX
    return b


def dispatcher_args(plan: dict) -> list[str]:
    """The MoE token dispatcher the plan was priced with (cost_model/terms/moe.py ep_comm_fwd_s):
    alltoall, or DeepEP through Megatron-Core's flex dispatcher (token_dispatcher.py
    MoEFlexTokenDispatcher, backend deepep). The router keeps the training dtype it was priced
    in (no --moe-router-dtype fp32, which would run the router GEMM in fp32): _DeepepManager
    casts the top-k probabilities to fp32 for DeepEP itself, with a logged warning
    (megatron-core 0.16.1)."""
    if par(plan).moe_dispatcher == DISPATCHER_DEEPEP:
        return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
    return ["--moe-token-dispatcher-type", "alltoall"]


def capacity_args(training: dict) -> list[str]:
    """Token dropping as the plan prices it (cost_model/terms/moe.py load_factor): the capacity
    factor, and padding every expert's input to the capacity (megatron-core 0.16.1
    moe_expert_capacity_factor / moe_pad_expert_input_to_capacity); the drop policy stays
    Megatron's default, the lowest routing probabilities."""
    c = training.get("moe_capacity_factor")
    if c is None:
        return []
    a = ["--moe-expert-capacity-factor", str(float(c))]
    if training.get("moe_pad_to_capacity"):
        a += ["--moe-pad-expert-input-to-capacity"]
    return a


def router_args(moe: dict) -> list[str]:
    """The router as the model scores and picks, in Megatron-Core's switches
    (transformer_config.py moe_router_* and moe_utils.py topk_routing_with_score_function
    @d98e8a64; Megatron-Bridge's DeepSeekV3ModelProvider sets the same, deepseek_provider.py
    @5776a6d): sigmoid scores with the auxiliary-loss-free expert bias
    (--moe-router-enable-expert-bias, sigmoid only), group-limited routing, the weight scale;
    a softmax router that does not renormalise its top-k takes the softmax first
    (--moe-router-pre-softmax; Megatron's default softmaxes the top-k logits, i.e.
    renormalised). Megatron normalises sigmoid top-k weights always (unexpressed_features)."""
    a = []
    if moe.get("score_function", ROUTER_SOFTMAX) == ROUTER_SIGMOID:
        a += ["--moe-router-score-function", ROUTER_SIGMOID]
        if moe.get("router_bias"):
            a += ["--moe-router-enable-expert-bias"]
    elif not moe.get("normalize_top_k", True):
        a += ["--moe-router-pre-softmax"]
    if int(moe.get("num_groups") or 0):
        a += ["--moe-router-num-groups", str(moe["num_groups"]), "--moe-router-group-topk", str(moe["group_top_k"])]
    if moe.get("topk_scaling_factor"):
        a += ["--moe-router-topk-scaling-factor", str(float(moe["topk_scaling_factor"]))]
    return a


def bias_args(model: dict) -> list[str] | None:
    """Megatron's bias switches for the model's biases, None where they cannot say it.
    add_bias_linear (on unless --disable-bias-linear) puts a bias on every linear layer: QKV,
    the attention output, the MLP's fc1 / fc2, the grouped experts' and the router
    (transformer_config.py add_bias_linear; moe/router.py TopKRouter; @d98e8a64);
    --add-qkv-bias adds QKV's alone. So: all of them, QKV only, or none."""
    b = linear_biases(model)
    if all(b.values()):
        return []
    others = [v for k, v in b.items() if k != "qkv"]
    if not any(others):
        return ["--disable-bias-linear"] + (["--add-qkv-bias"] if b["qkv"] else [])
    return None


def unexpressed_features(model: dict) -> list[str]:
    """The planned model's features these arguments do not build (the target is then skipped:
    the launched job would train another model than the one priced)."""
    out = []
    if ATTN_CHUNKED in _attention_kinds(model):
        # Megatron-Core has sliding windows (window_size) but no chunked attention at d98e8a64
        out.append("chunked attention (attention_chunk_size / layer_types)")
    moe = model.get("moe") or {}
    if (moe.get("score_function") == ROUTER_SIGMOID and not moe.get("normalize_top_k", True)
            and int(moe.get("top_k") or 1) > 1):
        out.append("sigmoid routing weights left unnormalised (Megatron normalises a sigmoid router's top-k)")
    if int(model.get("block_norms") or 2) != 2:
        out.append(f"{model['block_norms']} norms per block (the pre-norm block has 2)")
    if bias_args(model) is None:
        b = linear_biases(model)
        on = [k for k, v in b.items() if v]
        off = [k for k, v in b.items() if not v]
        out.append(f"biases on {', '.join(on)} but not on {', '.join(off)} (Megatron biases all linear layers, "
                   "QKV alone or none)")
    return out


def attention_args(model: dict) -> list[str]:
    """Sliding windows and sinks, as Megatron-Core builds them (transformer_config.py
    window_size / window_attn_skip_freq / softmax_type @d98e8a64; Megatron-Bridge's
    GPTOSSProvider sets the same three, gpt_oss_provider.py @5776a6d). A sliding block's
    query sees its w most recent keys itself included (HF's mask q - k < w), Transformer
    Engine's window (left, right) keys [q - left, q + right]: (w - 1, 0). The skip list
    marks the sliding blocks 1 and the full ones 0 (its help text), left out when every
    block slides. Sinks: one learned logit per head in the softmax, 'learnable'."""
    a = []
    kinds = _attention_kinds(model)
    if ATTN_SLIDING in kinds:
        a += ["--window-size", f"{int(model['sliding_window']) - 1},0"]
        if ATTN_FULL in kinds:
            a += ["--window-attn-skip-freq", bit_pattern([1 if k == ATTN_SLIDING else 0 for k in kinds])]
    if model.get("attention_sinks"):
        a += ["--softmax-type", "learnable"]
    return a


def activation_args(model: dict) -> list[str]:
    """The MLP activation. swiglu_limit is GPT-OSS's clamped gated activation (HF
    GptOssExperts: quick_gelu(min(gate, L)) * (clamp(up, -L, L) + 1), alpha 1.702), which
    Megatron builds as --quick-geglu with glu_linear_offset 1 and activation_func_clamp_value
    L (Megatron-Bridge GPTOSSProvider @5776a6d; the cost model prices that path,
    kernels.MEGATRON_GLU_CLAMP); otherwise --swiglu for the gated class."""
    if model.get("mlp") != MLP_SWIGLU:
        return []
    limit = model.get("swiglu_limit")
    if limit:
        return ["--quick-geglu", "--glu-linear-offset", "1.0", "--activation-func-clamp-value", str(float(limit))]
    return ["--swiglu"]


def model_args(plan: dict) -> list[str]:
    m = plan["model"]
    t = plan.get("training") or {}
    seq = int(t.get("seq_length") or m.get("max_position_embeddings") or 2048)
    heads = int(m["num_attention_heads"])
    a = [
        "--num-layers", str(m["num_layers"]),
        "--hidden-size", str(m["hidden_size"]),
        "--num-attention-heads", str(heads),
        "--ffn-hidden-size", str(m.get("ffn_hidden_size") or 4 * int(m["hidden_size"])),
        "--seq-length", str(seq),
        "--max-position-embeddings", str(max(seq, int(m.get("max_position_embeddings") or seq))),
    ]
    mla = m.get("mla")
    kv = m.get("num_kv_heads")
    if mla:
        # DeepSeek-V2 §2.1 multi-head latent attention (MLATransformerConfig; --qk-head-dim is
        # the no-position part, --qk-pos-emb-head-dim the decoupled RoPE part)
        a += ["--multi-latent-attention", "--kv-lora-rank", str(mla["kv_lora_rank"]),
              "--qk-head-dim", str(mla["qk_nope_head_dim"]), "--qk-pos-emb-head-dim", str(mla["qk_rope_head_dim"]),
              "--v-head-dim", str(mla["v_head_dim"])]
        if mla.get("q_lora_rank"):
            a += ["--q-lora-rank", str(mla["q_lora_rank"])]
    elif kv and int(kv) != heads:
        a += ["--group-query-attention", "--num-query-groups", str(kv)]
    head_dim = m.get("head_dim")
    if not mla and head_dim and int(head_dim) * heads != int(m["hidden_size"]):
        a += ["--kv-channels", str(head_dim)]  # Megatron's default is hidden / heads
    if m.get("qk_norm"):
        a += ["--qk-layernorm"]
    if int(m.get("num_nextn_predict_layers") or 0):
        # DeepSeek-V3 §2.2 multi-token prediction, on the last pipeline stage (pipeline_layout)
        a += ["--mtp-num-layers", str(int(m["num_nextn_predict_layers"]))]
    a += attention_args(m)
    a += activation_args(m)
    if m.get("norm") == NORM_RMSNORM:
        a += ["--normalization", "RMSNorm"]
    if m.get("position", POSITION_ROPE if m.get("mlp") == MLP_SWIGLU else POSITION_LEARNED) == POSITION_ROPE:
        a += ["--position-embedding-type", _WORDS["position_embedding_type"][POSITION_ROPE]]
        if m.get("rope_theta"):
            a += ["--rotary-base", str(int(float(m["rope_theta"])))]
    if not m.get("tie_embeddings", True):
        a += ["--untie-embeddings-and-output-weights"]
    a += bias_args(m) or []  # None: unexpressed_features refused the model before
    if m.get("dropout") is False:
        a += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    moe = m.get("moe")
    if moe:
        a += [
            "--num-experts", str(moe["num_experts"]),
            "--moe-router-topk", str(moe["top_k"]),
            "--moe-ffn-hidden-size", str(moe.get("ffn_hidden_size") or m.get("ffn_hidden_size")),
            "--moe-grouped-gemm",
        ]
        a += dispatcher_args(plan)
        a += capacity_args(t)
        a += router_args(moe)
        pattern = moe_layer_pattern(int(m["num_layers"]), moe)
        if pattern:
            a += ["--moe-layer-freq", pattern]
        shared = int(moe.get("num_shared_experts") or 0)
        if shared:
            ffn = int(moe.get("shared_ffn_hidden_size") or moe.get("ffn_hidden_size") or m.get("ffn_hidden_size"))
            a += ["--moe-shared-expert-intermediate-size", str(shared * ffn)]
    a += _DTYPE.get(t.get("dtype", DTYPE_BF16), [])
    if t.get("dtype") == DTYPE_FP8:
        a += _FP8_RECIPE[t.get("fp8_recipe") or FP8_TENSORWISE]
    return a


def overlap_tp(plan: dict) -> bool:
    """Whether the plan was priced with TP communication under the GEMMs (the same predicate
    as cost_model/terms/tp.py `tp_overlap`), i.e. whether --tp-comm-overlap is emitted."""
    p = par(plan)
    per_node = int((plan.get("cluster") or {}).get("gpus_per_node") or world_size(plan))
    return tp_comm_overlap(ENGINE_MEGATRON, int(p["tp"]), bool(p["sequence_parallel"]), per_node)


def precision_args(plan: dict) -> list[str]:
    """Gradient and parameter dtype flags, as the cost model prices the states.
    16-bit grads (grad buffer and its reduction) under bf16/fp8 training where the plan's
    training.grad_dtype says so (--grad-reduce-in-bf16 sets accumulate_allreduce_grads_in_fp32
    False, megatron/training/arguments.py validate_args). fp8 with a sharded optimizer:
    --fp8-param-gather, FP8 parameters gathered in FP8 (cost_model/engines/support.py
    state_bytes_per_param; validate_args allows it only with the distributed optimizer or an
    FSDP, which zero >= 1 emits). With MXFP8 the parameters are gathered through the gradient
    buffer, --reuse-grad-buf-for-mxfp8-param-ag (without it Transformer Engine refuses to remap
    an MXFP8 parameter into the parameter buffer; cost_model/engines/kernels.py param_gather_bytes;
    Megatron-Bridge's bf16_with_mxfp8_mixed sets both)."""
    t = plan.get("training") or {}
    dtype = t.get("dtype", DTYPE_BF16)
    a = []
    if dtype in (DTYPE_BF16, DTYPE_FP8) and t.get("grad_dtype") == DTYPE_BF16:
        a += ["--grad-reduce-in-bf16"]
    if dtype == DTYPE_FP8 and int(par(plan)["zero"]) >= 1:
        a += ["--fp8-param-gather"]
        if t.get("fp8_recipe") == FP8_MXFP8 and int(par(plan)["zero"]) == 1:
            # the distributed optimizer's path; Megatron-FSDP (zero 2/3) gathers MXFP8 its own
            # way and validate_args switches the flag off there
            a += ["--reuse-grad-buf-for-mxfp8-param-ag"]
    return a


def offload_args(plan: dict) -> list[str]:
    """The optimizer offload as priced (cost_model/terms/offload.py): every optimizer state on
    the host (fraction 1.0), the host copies streamed under the CPU steps per parameter
    (--overlap-cpu-optimizer-d2h-h2d), and --use-precision-aware-optimizer, without which
    Megatron-LM validate_args refuses --optimizer-cpu-offload (megatron/training/arguments.py
    "Optimizer CPU offload check"; megatron-core 0.16.1 optimizer/optimizer_config.py)."""
    if not par(plan).get("optimizer_offload"):
        return []
    return ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0", "--overlap-cpu-optimizer-d2h-h2d",
            "--use-precision-aware-optimizer"]


def act_offload_args(plan: dict) -> list[str]:
    """The activation offload as priced (cost_model/terms/act_offload.py): the level's
    modules (engines/offload.py ACT_OFFLOAD_MODULES) under Megatron-LM's flags for
    TransformerConfig.fine_grained_activation_offloading and .offload_modules (built from the
    dataclass by ArgumentGroupFactory, megatron/training/argument_utils.py @d98e8a64ddf3: a
    bool field is store_true, a list field nargs '+'). The default --min-offloaded-tensor-size
    (1024*1024 elements) is the one priced; megatron.sh exports NVTE_CPU_OFFLOAD_V1=1
    (process.env), which validate_args asks for with Transformer Engine >= 2.10."""
    modules = ACT_OFFLOAD_MODULES[par(plan).get("activation_offload") or ACT_OFFLOAD_NONE]
    return ["--fine-grained-activation-offloading", "--offload-modules", *modules] if modules else []


def layer_offload_args(plan: dict) -> list[str]:
    """The layer-level activation offload as priced (cost_model/terms/layer_offload.py):
    Megatron-LM's --cpu-offloading-num-layers N (megatron/training/arguments.py @d98e8a64ddf3:
    the TransformerConfig field through ArgumentGroupFactory; validate_args sets
    cpu_offloading when N > 0, and cpu_offloading_activations True / cpu_offloading_weights
    False keep their defaults, having no flag). Transformer Engine's default code path is the
    one priced: no NVTE_CPU_OFFLOAD_V1 is exported for it."""
    n = int(par(plan).get("cpu_offload_layers") or 0)
    return [LAYER_OFFLOAD_FLAG, str(n)] if n else []


def build(plan: dict) -> tuple[list[str], list[str]]:
    require_transformer(plan, TARGET_MEGATRON)
    missing = unexpressed_features(plan["model"])
    if missing:
        raise NotApplicable(f"{TARGET_MEGATRON}: the emitted arguments do not build {', '.join(missing)} of "
                            f"{plan['model'].get('name', 'the model')!r}; the job would train another model than the "
                            "one priced")
    p = par(plan)
    if p["pp"] > 1 and p["schedule"] in SPLIT_BACKWARD_SCHEDULES:
        # Megatron runs no zero-bubble schedule (cost_model/engines/support.py): emitting its
        # interleaved or 1F1B order would run another schedule than the one priced
        rule = engine_supports(ENGINE_MEGATRON, schedule=p["schedule"], pp=p["pp"], vpp=p["vpp"])
        raise NotApplicable(f"{TARGET_MEGATRON}: {rule}")
    replicas = int(p.get("dp_replicate", 1))
    if replicas > 1 and (rule := engine_supports(ENGINE_MEGATRON, zero=int(p["zero"]), dp_replicate=replicas)):
        raise NotApplicable(f"{TARGET_MEGATRON}: {rule}")
    m = plan["model"]
    notes: list[str] = []
    a = [
        "--tensor-model-parallel-size", str(p["tp"]),
        "--pipeline-model-parallel-size", str(p["pp"]),
        "--context-parallel-size", str(p["cp"]),
    ]
    if p["cp"] > 1:
        a += cp_comm_args(plan)
    if m.get("moe"):
        # Megatron defaults expert TP to tp (arguments.py validate_args); the plan's etp is explicit
        a += ["--expert-model-parallel-size", str(p["ep"]), "--expert-tensor-parallel-size", str(p["etp"])]
    if p["sequence_parallel"] and p["tp"] > 1:
        a += ["--sequence-parallel"]
    if overlap_tp(plan):
        # TE userbuffers: TP all-gathers / reduce-scatters under the GEMMs, as priced
        a += ["--tp-comm-overlap"]
    if m.get("moe") and p.moe_a2a_overlap:
        # combined 1F1B steps: one micro-batch's expert all-to-alls under another's compute, as
        # priced (cost_model/terms/moe.py combined_pair_s); the engine's rules were checked when the
        # plan was validated (cost_model/engines/support.py _a2a_overlap_rule)
        a += ["--overlap-moe-expert-parallel-comm"]
    if m.get("moe") and p.moe_dispatcher == DISPATCHER_DEEPEP:
        notes.append("moe_dispatcher deepep: the job imports DeepEP (deep_ep, github.com/deepseek-ai/DeepEP, built "
                     "with NVSHMEM; NGC PyTorch / NeMo containers ship it); without it Megatron-Core stops at start "
                     "with 'DeepEP is not installed'. Its internode kernels need InfiniBand/RoCE with IBGDA and the "
                     "network's adaptive routing off (fused_a2a.py get_buffer)")
    layout, n = pipeline_layout(plan)
    a += layout
    notes += n
    if p["schedule"] == SCHEDULE_GPIPE:
        notes.append("Megatron has no GPipe schedule; it will run 1F1B (same bubble, less activation memory)")
    a += [
        "--micro-batch-size", str(p["micro_batch_size"]),
        "--global-batch-size", str(global_batch(plan)),
    ]
    requested = (plan.get("training") or {}).get("global_batch_size")
    if requested and int(requested) != global_batch(plan):
        notes.append(
            f"training.global_batch_size={requested} but micro*num_micro_batches*dp={global_batch(plan)}; "
            "emitted the latter (what the planned schedule runs)"
        )
    rc, n = recompute(plan)
    a += rc
    notes += n
    zero = int(p["zero"])
    if zero >= 1:
        a += ["--use-distributed-optimizer"]
    if replicas > 1:
        # hybrid sharding: the distributed optimizer over dp*cp/R consecutive ranks, the R
        # instances all-reducing their reduced shards (megatron-core 0.16.1
        # distributed_data_parallel_config.py num_distributed_optimizer_instances)
        a += ["--num-distributed-optimizer-instances", str(replicas)]
    if zero >= 2:
        # the sharding the plan was priced with (cost_model/engines/support.py MEGATRON: Megatron-FSDP
        # optim_grads / optim_grads_params, which needs the distributed optimizer too)
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy]
        # validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format"
        a += ["--ckpt-format", "fsdp_dtensor"]
    if p["dp"] * p["cp"] > 1:
        # Gradients are reduced over dp x cp; the prediction hides that behind the backward.
        a += ["--overlap-grad-reduce"]
        if zero >= 1:
            a += ["--overlap-param-gather"]
    if zero >= 2 and p["pp"] > 1:
        notes.append(f"ZeRO-{zero} (Megatron-FSDP) with pp={p['pp']}: Megatron-FSDP does not combine with "
                     "pipeline parallelism; the planner does not propose it")
    a += precision_args(plan)
    a += offload_args(plan)
    a += act_offload_args(plan)
    a += layer_offload_args(plan)
    a += model_args(plan)
    # Runnable as-is on synthetic data; swap for --data-path/--tokenizer-model for a real run.
    a += [
        "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.get("vocab_size") or 32000),
        "--optimizer", _WORDS["optimizer"].get((plan.get("training") or {}).get("optimizer"), _WORDS["optimizer"][OPTIMIZER_ADAM]),
        "--lr", "3.0e-4", "--train-iters", "1000",
    ]
    notes.append("--mock-data/NullTokenizer/--lr/--train-iters are placeholders for a smoke run")
    return a, notes


def cp_comm_args(plan: dict) -> list[str]:
    """The context-parallel communication the plan was priced with (cost_model/terms/layers.py
    cp.block_cp_s): --cp-comm-type (Megatron-LM arguments.py; its value goes to Transformer
    Engine as is: p2p, all_gather, a2a, a2a+p2p, megatron-core transformer_config.py
    cp_comm_type) and, for a2a+p2p, --hierarchical-context-parallel-sizes a2a ring, the two
    levels the cost model split cp into (cost_model/model/attention.py a2a_p2p_sizes)."""
    p, m = par(plan), plan["model"]
    kind = p.cp_comm or CP_P2P
    a = ["--cp-comm-type", kind]
    if kind == CP_A2A_P2P:
        q = int(m["num_attention_heads"])
        kv = q if m.get("mla") else int(m.get("num_kv_heads") or q)
        inner, outer = attention.a2a_p2p_sizes_of(q, kv, p["tp"], p["cp"])
        a += ["--hierarchical-context-parallel-sizes", str(inner), str(outer)]
    return a


def global_batch(plan: dict) -> int:
    p = par(plan)
    return p["micro_batch_size"] * p["num_micro_batches"] * p["dp"]


def args(plan: dict) -> list[str]:
    return build(plan)[0]


def emit(plan: dict) -> dict:
    a, notes = build(plan)
    out = {
        "args": a,
        # One process per GPU; torchrun sets RANK/WORLD_SIZE/LOCAL_RANK that Megatron reads.
        "command": join([*launcher(plan), "pretrain_gpt.py", *a]),
        "env": env(plan),
        "source_commit": data.source_commit(FLAGS_FILE),
        "targets": [f"Megatron-LM main@{data.source_commit(FLAGS_FILE)[:12]}", "megatron-core==0.16.1"],
        "notes": notes + ["run from a Megatron-LM checkout (pretrain_gpt.py); multi-node: set NODE_RANK and MASTER_ADDR"],
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
