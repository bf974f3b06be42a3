"""The one request schema (REST body == `--request` file == what the CLI builds from its
flags), as pydantic models; DESIGN.md "Request" and docs/request.md describe it.

Every field a request may carry is declared here, with its range, a description and an
example, so OpenAPI documents it; unknown fields are refused by name (`extra="forbid"`),
free-form client data goes under the top-level `metadata` key. Types are strict: a string
is not a number and 4.0 is not an integer. Closed sets of words come from cost_model/specs/vocab.py.

The schema is the planner's input: the REST routes and the CLI validate a request with it
once, at the edge, and hand the validated model to the facade (planner/service.py).

The limits are the ones of the service, the CLI and the cost model alike (one table, in
cost_model/validate.py, which checks every spec's fields against the same bounds): ranges
that keep the arithmetic meaningful (a 10^7-layer model is a typo, not a plan). Cross-field
rules that need only the request itself (heads divide the hidden size, top-k within the
experts) are model validators here, applying the cost model's rules (validate.shape_rule,
routing_rule); rules that need the resolved GPU or the parallel degrees (nodes filled, heads
divisible by tp) are physics checks in cost_model/validate.py.

`validate_as(Model, data, path)` (errors.py) is the one entry: it raises SpecError
with the dotted field path (`model.transformer.num_layers`, `search.tp[1]`) and the allowed
values or range, the same path the REST 422 carries (api/errors.py uses `spec_error_from`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cost_model.hardware.network import SYSTEMS, parse_network
from cost_model.specs.errors import SpecError, close_match
from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.limits import (
    MAX_BATCH,
    MAX_EXPERTS,
    MAX_FFN,
    MAX_GB_S,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_HOST_MEMORY_GB,
    MAX_LAYERS,
    MAX_LOSS_CHUNKS,
    MAX_MOE_IMBALANCE,
    MAX_OVERSUBSCRIPTION,
    MAX_SEQ,
    MAX_TOTAL_TOKENS,
    MAX_USD_PER_GPU_H,
    MAX_VOCAB,
)
from cost_model.specs.vocab import (
    ACT_OFFLOAD_ATTN,
    ACT_OFFLOAD_NONE,
    ATTENTION_FLASH,
    ATTN_GQA,
    ATTN_MHA,
    ATTN_MLA,
    CP_P2P,
    DISPATCHER_ALLTOALL,
    DISPATCHER_DEEPEP,
    DTYPE_BF16,
    DTYPE_FP8,
    DTYPE_FP32,
    ENGINE_MEGATRON,
    MLP_GELU,
    MLP_SWIGLU,
    NORM_RMSNORM,
    OPTIMIZER_ADAM,
    POSITION_ROPE,
    ROUTER_SOFTMAX,
    SCHEDULE_1F1B,
    SCHEDULE_INTERLEAVED,
    ActivationOffload,
    Attention,
    AttentionKind,
    AttentionLayer,
    CpComm,
    Dtype,
    Engine,
    Fp8Recipe,
    Mlp,
    ModelKind,
    MoeDispatcher,
    Norm,
    Optimizer,
    Position,
    Recompute,
    RouterScore,
    Schedule,
    Target,
    TrainDtype,
    ZeroStage,
    values,
)
from cost_model.validate import divisors, routing_rule, shape_rule
from planner.request.errors import (
    GPU_TAG_NAME,
    GPU_TAG_OBJECT,
    NESTING_TOO_DEEP,
    UNION_TAGS,
    spec_error_from,
    validate_as,
)

# ------------------------------------------------------------------ limits
# the spec fields' limits are the cost model's (cost_model/validate.py, one table); the search's are here
MAX_TOP_K = 50
MAX_TIME_LIMIT_S = 3600.0
MAX_GAP_LIMIT = 0.5  # search.gap_limit: beyond half, a "plan" would promise nothing
DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_HEADROOM = 0.05
# Free-form objects (metadata, hf_config, a profile's extra blocks) nest objects and lists at
# most this many levels deep. A Hugging Face config.json nests 3 or 4 (text_config.rope_scaling);
# pydantic refuses to serialise JSON beyond 256 levels, which used to surface as a 500 when the
# request was hashed. 32 leaves room for any real document and refuses a hostile one at the edge.
MAX_FREEFORM_DEPTH = 32


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _rule(field: str, message: str, allowed: Any) -> PydanticCustomError:
    """A cross-field failure that names its sub-field and what would be allowed."""
    return PydanticCustomError("spec", "{message}", {"field": field, "message": message, "allowed": allowed})


def nested_deeper_than(value: Any, max_levels: int) -> bool:
    """Whether `value` nests dicts and lists more than `max_levels` deep (`value` itself is
    level 1). Iterative, so a hostile depth cannot exhaust the interpreter's stack, and it
    stops at the first path over the limit (a cyclic YAML alias counts as too deep)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > max_levels:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def _shallow(value: Any) -> Any:
    if nested_deeper_than(value, MAX_FREEFORM_DEPTH):
        raise PydanticCustomError(NESTING_TOO_DEEP, "nested deeper than the limit of {max_depth} levels",
                                  {"max_depth": MAX_FREEFORM_DEPTH})
    return value


# a free-form JSON object: any keys and values, nested at most MAX_FREEFORM_DEPTH levels
Shallow = AfterValidator(_shallow)
FreeForm = Annotated[dict[str, Any], Shallow]


# ------------------------------------------------------------------ model


class MoE(_Strict):
    """Mixture-of-experts FFN (Mixtral, DeepSeek-V3)."""

    num_experts: int = Field(ge=1, le=MAX_EXPERTS, description="routed experts per MoE block", examples=[8])
    top_k: int = Field(ge=1, le=MAX_EXPERTS, description="experts each token is routed to (<= num_experts)", examples=[2])
    ffn_hidden_size: int = Field(ge=1, le=MAX_FFN, description="FFN hidden size of one expert", examples=[14336])
    layer_freq: int = Field(1, ge=1, le=MAX_LAYERS, description="every k-th block (after the dense ones) is MoE", examples=[1])
    num_shared_experts: int = Field(0, ge=0, le=MAX_EXPERTS, description="always-active shared experts (DeepSeek-V3: 1)", examples=[0])
    first_dense_layers: int = Field(0, ge=0, le=MAX_LAYERS, description="leading dense blocks (DeepSeek-V3: 3)", examples=[0])
    moe_layers: list[Annotated[int, Field(ge=0, lt=MAX_LAYERS)]] | None = Field(
        None, max_length=MAX_LAYERS, description="explicit MoE block indices (overrides layer_freq/first_dense_layers)")
    shared_ffn_hidden_size: int | None = Field(None, ge=1, le=MAX_FFN, description="FFN width of a shared expert; default ffn_hidden_size")
    router_bias: bool = Field(False, description="softmax router: its Linear has a bias (GPT-OSS); sigmoid router: the "
                              "auxiliary-loss-free per-expert bias on the choice (DeepSeek-V3 e_score_correction_bias)")
    expert_bias: bool = Field(False, description="expert matrices with biases (GPT-OSS)")
    score_function: RouterScore = Field(ROUTER_SOFTMAX, description="router score function: softmax (Mixtral, Qwen, "
                                        "GPT-OSS) or sigmoid (DeepSeek-V3, GLM-4.5)", examples=[ROUTER_SOFTMAX])
    normalize_top_k: bool = Field(True, description="the chosen experts' weights are renormalised to sum to 1 (HF "
                                  "norm_topk_prob); false: the full softmax's top-k probabilities (Qwen2-MoE)")
    num_groups: int = Field(0, ge=0, le=MAX_EXPERTS, description="group-limited routing: experts in this many equal "
                            "groups (DeepSeek-V3: 8); 0 = plain top-k", examples=[0])
    group_top_k: int = Field(0, ge=0, le=MAX_EXPERTS, description="groups each token chooses among (DeepSeek-V3: 4)",
                             examples=[0])
    topk_scaling_factor: float | None = Field(None, gt=0, le=1e3, description="scale on the routing weights "
                                              "(DeepSeek-V3 routed_scaling_factor 2.5); null: 1", examples=[None])

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoE:
        broken = routing_rule(self.num_experts, self.top_k, self.num_groups, self.group_top_k)
        if broken is not None:
            raise _rule(*broken)
        return self


class MLA(_Strict):
    """Multi-head latent attention (DeepSeek-V2 §2.1): K/V from a per-token latent."""

    kv_lora_rank: int = Field(ge=1, le=MAX_HIDDEN, description="K/V latent width", examples=[512])
    qk_nope_head_dim: int = Field(ge=0, le=MAX_HIDDEN, description="per-head q/k width without RoPE", examples=[128])
    qk_rope_head_dim: int = Field(ge=0, le=MAX_HIDDEN, description="per-head q/k RoPE width (shared k head)", examples=[64])
    v_head_dim: int = Field(ge=1, le=MAX_HIDDEN, description="per-head value width", examples=[128])
    q_lora_rank: int | None = Field(None, ge=1, le=MAX_HIDDEN, description="query latent width; null: a plain q projection",
                                    examples=[1536])


class AttentionBlock(_Strict):
    """The attention fields grouped, as DESIGN.md's request writes them
    (`transformer.attention: {kind: mha|gqa|mla, q_lora_rank?, kv_lora_rank?,
    qk_nope_head_dim?, qk_rope_head_dim?, v_head_dim?, sliding_window?, layer_types?}`): the
    same fields as the transformer's flat `mla`, `sliding_window`, `layer_types`, to which
    Transformer folds them; kind mha / gqa says whether num_kv_heads may differ from the heads."""

    kind: AttentionKind = Field(ATTN_MHA, description="mha: one K/V head per query head; gqa: num_kv_heads groups; "
                                "mla: multi-head latent attention (the MLA widths below)", examples=[ATTN_MHA])
    kv_lora_rank: int | None = Field(None, ge=1, le=MAX_HIDDEN, description="mla: K/V latent width", examples=[512])
    qk_nope_head_dim: int | None = Field(None, ge=0, le=MAX_HIDDEN, description="mla: per-head q/k width without RoPE")
    qk_rope_head_dim: int | None = Field(None, ge=0, le=MAX_HIDDEN, description="mla: per-head q/k RoPE width")
    v_head_dim: int | None = Field(None, ge=1, le=MAX_HIDDEN, description="mla: per-head value width")
    q_lora_rank: int | None = Field(None, ge=1, le=MAX_HIDDEN, description="mla: query latent width; null: a plain q projection")
    sliding_window: int | None = Field(None, ge=1, le=MAX_SEQ, description="keys per query on sliding-window layers")
    layer_types: list[AttentionLayer] | None = Field(None, max_length=MAX_LAYERS, description="per-block attention kind")

    @model_validator(mode="after")
    def _mla_widths(self) -> AttentionBlock:
        widths = {k: getattr(self, k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        if self.kind == ATTN_MLA:
            for k, v in widths.items():
                if v is None:
                    raise _rule(k, f"kind mla needs {k}", "an integer")
        else:
            for k, v in {**widths, "q_lora_rank": self.q_lora_rank}.items():
                if v is not None:
                    raise _rule(k, f"{k} is an MLA width; kind is {self.kind!r}", [ATTN_MLA])
        return self


class Transformer(_Strict):
    """Decoder-only transformer: GPT (MHA, GELU, LayerNorm, learned positions) or Llama
    (GQA, SwiGLU, RMSNorm, RoPE), optionally with MoE blocks."""

    name: str = Field("custom", max_length=200, description="label echoed in the plan", examples=["my-model"])
    num_layers: int = Field(ge=1, le=MAX_LAYERS, description="transformer blocks", examples=[32])
    hidden_size: int = Field(ge=1, le=MAX_HIDDEN, examples=[4096])
    num_attention_heads: int = Field(ge=1, le=MAX_HEADS, examples=[32])
    num_kv_heads: int | None = Field(None, ge=1, le=MAX_HEADS, description="KV heads (GQA); default num_attention_heads", examples=[8])
    ffn_hidden_size: int | None = Field(None, ge=1, le=MAX_FFN, description="default 4 x hidden_size", examples=[14336])
    vocab_size: int = Field(ge=1, le=MAX_VOCAB, examples=[128256])
    mlp: Mlp = Field(MLP_GELU, description="gelu: two matrices; swiglu: gated, three", examples=[MLP_SWIGLU])
    norm: Norm | None = Field(None, description="default rmsnorm with swiglu, else layernorm", examples=[NORM_RMSNORM])
    position: Position | None = Field(None, description="default rope with swiglu, else learned", examples=[POSITION_ROPE])
    tie_embeddings: bool = Field(False, description="output layer shares the input embedding", examples=[False])
    max_position_embeddings: int = Field(2048, ge=1, le=MAX_SEQ, description="learned position table size", examples=[8192])
    moe: MoE | None = Field(None, description="MoE blocks; null for a dense model")
    dropout: bool = Field(False, description="hidden/attention dropout on (GPT-era training)", examples=[False])
    head_dim: int | None = Field(None, ge=1, le=MAX_HIDDEN, description="default hidden_size / num_attention_heads", examples=[128])
    rope_theta: float | None = Field(None, gt=0, description="RoPE base (carried into the plan)", examples=[500000.0])
    mla: MLA | None = Field(None, description="multi-head latent attention (DeepSeek-V3, Kimi-K2); null: MHA/GQA")
    attention: AttentionBlock | None = Field(None, description="the attention fields grouped (DESIGN.md's form), folded "
                                             "into mla / sliding_window / layer_types; give one form or the other")
    num_nextn_predict_layers: int = Field(0, ge=0, le=64, description="multi-token-prediction modules (DeepSeek-V3 §2.2: 1), "
                                          "counted apart from the model's parameters", examples=[0])
    sliding_window: int | None = Field(None, ge=1, le=MAX_SEQ, description="keys per query on sliding-window layers", examples=[4096])
    attention_chunk_size: int | None = Field(None, ge=1, le=MAX_SEQ, description="chunked attention (Llama 4): causal inside chunks")
    layer_types: list[AttentionLayer] | None = Field(None, max_length=MAX_LAYERS, description="per-block attention kind; "
                                                     "default full attention (sliding everywhere when only sliding_window is set)")
    attention_sinks: bool = Field(False, description="one learned softmax sink logit per head (GPT-OSS)")
    qk_norm: bool = Field(False, description="RMSNorm on q and k per head (Qwen3, Gemma 3)")
    qkv_bias: bool | None = Field(None, description="Q/K/V projection biases; default: only with layernorm (GPT)")
    out_proj_bias: bool | None = Field(None, description="attention output projection bias; default as qkv_bias")
    mlp_bias: bool | None = Field(None, description="dense MLP biases; default: only with layernorm (GPT)")
    block_norms: int = Field(2, ge=1, le=8, description="norms per block (Gemma 2/3 sandwich norms: 4)")
    swiglu_limit: float | None = Field(
        None, gt=0, le=1e6, description="clamp of the gated MLP's two fc1 halves before the activation (GPT-OSS: 7.0, "
        "HF swiglu_limit); the engines keep extra copies for backward. Needs mlp swiglu. null: no clamp",
        examples=[7.0])

    @model_validator(mode="after")
    def _fold_attention(self) -> Transformer:
        """The grouped attention block into the flat fields (one schema for the spec)."""
        at = self.attention
        if at is None:
            return self
        for k in ("mla", "sliding_window", "layer_types"):
            if getattr(self, k) is not None:
                raise _rule(k, f"given twice: as {k} and in attention; give one", ["attention", k])
        if at.kind == ATTN_MHA and self.num_kv_heads not in (None, self.num_attention_heads):
            raise _rule("attention.kind", f"mha has one K/V head per query head, not num_kv_heads={self.num_kv_heads}",
                        [ATTN_GQA])
        if at.kind == ATTN_GQA and self.num_kv_heads is None:
            raise _rule("num_kv_heads", "attention kind gqa needs num_kv_heads", divisors(self.num_attention_heads))
        if at.kind == ATTN_MLA:
            self.mla = MLA(kv_lora_rank=at.kv_lora_rank, qk_nope_head_dim=at.qk_nope_head_dim,
                           qk_rope_head_dim=at.qk_rope_head_dim, v_head_dim=at.v_head_dim, q_lora_rank=at.q_lora_rank)
        self.sliding_window, self.layer_types, self.attention = at.sliding_window, at.layer_types, None
        return self

    @model_validator(mode="after")
    def _shapes(self) -> Transformer:
        broken = shape_rule(self.hidden_size, self.num_attention_heads, self.num_kv_heads or self.num_attention_heads,
                            self.head_dim, self.mlp, self.swiglu_limit, self.num_layers,
                            None if self.moe is None else self.moe.layer_freq)
        if broken is not None:
            raise _rule(*broken)
        return self


class Layer(_Strict):
    """One layer of a generic model: per sequence of training.seq_length tokens, forward
    pass, unsharded."""

    name: str | None = Field(None, max_length=200, description="default layer<i>", examples=["embed"])
    fwd_flops: float = Field(ge=0, le=1e21, description="forward FLOPs per sequence", examples=[1.2e12])
    params: float = Field(ge=0, le=1e13, description="parameters", examples=[2.0e8])
    activation_bytes: float = Field(ge=0, le=1e13, description="bytes saved for backward per sequence", examples=[3.0e8])
    output_bytes: float = Field(ge=0, le=1e13, description="bytes of the output per sequence (sent between stages)", examples=[1.6e7])


_MODEL_SHAPES = ("name", "hf_config", *values(ModelKind))


class Model(_Strict):
    """Exactly one of `name` (a preset), `hf_config`, `transformer`, `layers`; `name` may
    accompany the other three as a label."""

    name: str | None = Field(None, max_length=200, description="preset name (GET /v1/models), or a label", examples=["llama3-8b"])
    hf_config: FreeForm | None = Field(
        None, description="a Hugging Face config.json (Llama, Mistral, Qwen2, Mixtral, DeepSeek-V3, GPT-2)",
        examples=[{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                   "intermediate_size": 14336, "vocab_size": 128256}],
    )
    transformer: Transformer | None = None
    layers: list[Layer] | None = Field(None, min_length=1, max_length=MAX_LAYERS, description="a generic layer list")

    @model_validator(mode="after")
    def _one_shape(self) -> Model:
        given = [k for k in _MODEL_SHAPES[1:] if getattr(self, k) is not None]
        if len(given) > 1 or (not given and self.name is None):
            raise PydanticCustomError("spec", "{message}", {
                "field": "", "message": "give exactly one of name, hf_config, transformer, layers",
                "allowed": list(_MODEL_SHAPES)})
        return self


# ------------------------------------------------------------------ cluster


class GpuOverride(_Strict):
    """A GPU not in the catalog, or a catalog GPU with some numbers changed: `base` names
    the catalog entry the other fields replace. Without a base, memory_gib, hbm_gb_s,
    peak_tflops (every dtype), nvlink_gb_s and network_gb_s are required."""

    base: str | None = Field(None, max_length=100, description="catalog GPU the other fields modify", examples=["h100-sxm"])
    name: str | None = Field(None, max_length=100, description="label (default: base + '-custom')", examples=["h100-custom"])
    memory_gib: float | None = Field(None, gt=0, le=1e5, examples=[80.0])
    hbm_gb_s: float | None = Field(None, gt=0, le=MAX_GB_S, examples=[3350.0])
    peak_tflops: dict[Dtype, Annotated[float, Field(gt=0, le=1e6)]] | None = Field(
        None, description="dense TFLOP/s per dtype", examples=[{DTYPE_BF16: 989.4, DTYPE_FP8: 1978.9}])
    nvlink_gb_s: float | None = Field(None, gt=0, le=MAX_GB_S, description="per GPU per direction inside a node", examples=[450.0])
    network_gb_s: float | None = Field(None, gt=0, le=MAX_GB_S, description="per GPU per direction across nodes", examples=[50.0])
    gpus_per_node: int | None = Field(None, ge=1, le=MAX_GPUS_PER_NODE, examples=[8])


def _gpu_tag(v: Any) -> str:
    return GPU_TAG_NAME if isinstance(v, str) else GPU_TAG_OBJECT


GpuField = Annotated[
    Annotated[str, Tag(GPU_TAG_NAME), Field(max_length=100)] | Annotated[GpuOverride, Tag(GPU_TAG_OBJECT)],
    Discriminator(_gpu_tag),
]


def _network_text(v: str) -> str:
    """cluster.network: readable as NICs x rate (hardware/network.py parse_network)."""
    try:
        parse_network(v)
    except SpecError as e:
        meant = f"; did you mean {e.suggestion!r}?" if e.suggestion else ""
        raise _rule("", e.message + meant, e.allowed) from None
    return v


def _system_name(v: str | None) -> str | None:
    if v is not None and v.strip().lower() not in SYSTEMS:
        meant = close_match(v, SYSTEMS)
        raise _rule("", f"unknown system {v!r}" + (f"; did you mean {meant!r}?" if meant else ""), sorted(SYSTEMS))
    return v


class Cluster(_Strict):
    gpu: GpuField | None = Field(None, description="GPU name (GET /v1/gpus), or an object {base?, ...} overriding "
                                 "numbers; may be left out when `system` names one", examples=["h100-sxm"])
    num_gpus: int = Field(ge=1, le=MAX_GPUS, examples=[64])
    gpus_per_node: int | None = Field(None, ge=1, le=MAX_GPUS_PER_NODE, description="default: the GPU's node size, capped by num_gpus", examples=[8])
    nvlink_domain: int | None = Field(None, ge=1, le=MAX_GPUS, description="GPUs on one NVLink fabric (NVL72: 72); default the part's (catalog nvlink_domain, else gpus_per_node); the job uses its largest share of whole nodes that divides num_gpus (256 GPUs of NVL72 racks: 64)", examples=[8])
    intra_node_gb_s: float | None = Field(None, gt=0, le=MAX_GB_S, description="NVLink GB/s per GPU per direction; default the GPU's", examples=[450.0])
    inter_node_gb_s: float | None = Field(None, gt=0, le=MAX_GB_S, description="network GB/s per GPU per direction: the "
                                          "shorthand for one NIC per GPU at this rate; default the GPU's (or the system's "
                                          "network)", examples=[50.0])
    system: Annotated[str, AfterValidator(_system_name)] | None = Field(None, max_length=100, description="a catalog system (GET /v1/systems) that fills the GPU's "
                               "node, NVLink domain and network; fields given beside it override it", examples=["dgx-h100"])
    network: Annotated[str, AfterValidator(_network_text)] | None = Field(
        None, max_length=200, description="the node's compute NICs as operators write them: NICs x rate, in Gb/s as "
        "vendors quote them or GB/s, then optionally the fabric and its layout (\"8 x 400 Gb/s IB rail-optimised\", "
        "\"4 x 100 Gb RoCE\"); excludes inter_node_gb_s", examples=["8 x 400 Gb/s"])
    rail_optimized: bool | None = Field(None, description="each NIC index on its own rail switch (NCCL rings keep to "
                                        "one rail, NCCL_CROSS_NIC); default the network's words, the system's, else true",
                                        examples=[True])
    oversubscription: float | None = Field(None, ge=1, le=MAX_OVERSUBSCRIPTION, description="leaf switches' downlink : "
                                           "uplink bandwidth (2 = 2:1); slows all-to-all, and rings off a rail-optimised "
                                           "fabric; default 1 (non-blocking)", examples=[1.0])
    intra_node_latency_s: float | None = Field(None, ge=0, le=1.0, description="collective latency inside a node; default the GPU's", examples=[5e-6])
    inter_node_latency_s: float | None = Field(None, ge=0, le=1.0, description="collective latency across nodes; default the GPU's", examples=[1e-5])
    host_memory_gb: float | None = Field(None, gt=0, le=MAX_HOST_MEMORY_GB, description="host (CPU) memory per node, GB, "
                                         "for offloaded optimizer states; default the GPU's system (catalog)", examples=[2048.0])
    profile_id: str | None = Field(None, max_length=64, description="REST: a profile stored with POST /v1/profiles", examples=["prof_0123"])
    price_per_gpu_hour: float | None = Field(
        None, gt=0, le=MAX_USD_PER_GPU_H, description="USD per GPU-hour (your contract price) for the plan's "
        "cost; overrides the list-price table (cost_model/hardware/prices.toml) and `planner plan --prices`; "
        "null: the table's price for the GPU, if it has one", examples=[2.5])

    @model_validator(mode="after")
    def _gpu_or_system(self) -> Cluster:
        if self.gpu is None and self.system is None:
            raise _rule("gpu", "is required (a catalog name, GET /v1/gpus) unless `system` names one", ["gpu", "system"])
        if self.network is not None and self.inter_node_gb_s is not None:
            raise _rule("network", "give the network or the per-GPU inter_node_gb_s, not both",
                        ["network", "inter_node_gb_s"])
        return self


# ------------------------------------------------------------------ training


def _compile_setting(v: Any) -> Any:
    """training.compile: true, false or "model" (one message naming the three, not one per
    member of the union)."""
    if v is True or v is False or v == "model":
        return v
    raise _rule("", f"must be true, false or \"model\", got {v!r}", [True, False, "model"])


class Training(_Strict):
    global_batch_size: int = Field(ge=1, le=MAX_BATCH, description="sequences per step", examples=[128])
    seq_length: int = Field(ge=1, le=MAX_SEQ, description="tokens per sequence (the whole sequence, before CP splits it)", examples=[8192])
    dtype: TrainDtype = Field(DTYPE_BF16, description="compute precision", examples=[DTYPE_BF16])
    optimizer: Optimizer = Field(OPTIMIZER_ADAM, examples=[OPTIMIZER_ADAM])
    master_weights_dtype: Dtype = Field(DTYPE_FP32, description="optimizer's master copy of the weights", examples=[DTYPE_FP32])
    grad_dtype: Dtype = Field(DTYPE_FP32, description="gradient accumulation / reduction dtype", examples=[DTYPE_FP32])
    attention: Attention = Field(ATTENTION_FLASH, description="flash: O(s) attention memory; eager: s^2 scores stored", examples=[ATTENTION_FLASH])
    compile: Annotated[bool | Literal["model"], BeforeValidator(_compile_setting)] = Field(
        False, description="torch.compile (torchtitan compile.enable): fused memory-bound kernels; true compiles the "
        "model and the loss (torchtitan's default compile.components), \"model\" the model alone", examples=[False])
    fp8_all_gather: bool = Field(
        False, description="torchtitan Float8 (torchao tensorwise): FSDP2 all-gathers the weights in float8 "
        "(enable_fsdp_float8_all_gather), 1 byte per parameter; needs dtype fp8. Megatron gathers FP8 parameters "
        "on its own under fp8 with a sharded optimizer (--fp8-param-gather)", examples=[False])
    fp8_recipe: Fp8Recipe | None = Field(
        None, description="Megatron / Transformer Engine FP8 scaling (--fp8-recipe) under dtype fp8: tensorwise (per-tensor "
        "current scaling) or mxfp8 (Blackwell); null: mxfp8 on GPUs with MXFP8 tensor cores, else tensorwise",
        examples=[None])
    loss_chunks: int | None = Field(
        None, ge=1, le=MAX_LOSS_CHUNKS, description="sequence chunks the output layer and loss run in, each chunk's "
        "backward at once (torchtitan --loss.num_chunks); null: the engine's default (torchtitan 8, others 1)",
        examples=[None])
    moe_imbalance: float | None = Field(
        None, ge=1, le=MAX_MOE_IMBALANCE, description="MoE: the busiest expert rank's routed tokens over the mean, "
        "as measured on your router (early training, skewed data); null: balanced routing's sampling spread",
        examples=[None])
    moe_capacity_factor: float | None = Field(
        None, gt=0, le=MAX_MOE_IMBALANCE, description="MoE token dropping (Megatron --moe-expert-capacity-factor): "
        "an expert keeps at most ceil(C x its mean tokens), the rest are dropped; null: dropless", examples=[None])
    moe_pad_to_capacity: bool = Field(
        False, description="pad every expert's input to the capacity (--moe-pad-expert-input-to-capacity): fixed "
        "shapes, no host synchronisation per MoE layer; needs moe_capacity_factor", examples=[False])
    total_tokens: int | None = Field(
        None, ge=1, le=MAX_TOTAL_TOKENS, description="tokens to train on: the plan then reports the steps, the "
        "time to train and its cost (plan.economics); null: per-step economics only", examples=[15_000_000_000_000])
    goodput: float = Field(
        1.0, gt=0, le=1, description="the fraction of wall time that is productive training steps (the rest: "
        "restarts after failures, checkpointing, evaluation, queueing); divides the time to train", examples=[0.9])


# ------------------------------------------------------------------ search


def _as_list(v: Any) -> Any:
    return v if isinstance(v, list) else [v]


def _choice(item: Any, example: Any, what: str, null: str = "open"):
    """A search knob: one value or a non-empty list of allowed values (null = open, or what
    `null` says)."""
    items = Annotated[list[item], Field(min_length=1)]
    return Annotated[
        items | None,
        BeforeValidator(lambda v: None if v is None else _as_list(v), json_schema_input_type=item | items | None),
        Field(None, description=f"{what}: a value or a list of allowed values; null = {null}", examples=[example]),
    ]


Degree = Annotated[int, Field(ge=1, le=MAX_GPUS)]


class Search(_Strict):
    engine: Engine = Field(ENGINE_MEGATRON, description="the request's engine (an older spelling of the top-level "
                           "`engine`, which it must agree with)", examples=[ENGINE_MEGATRON])
    tp: _choice(Degree, [1, 2, 4, 8], "tensor-parallel degree")
    pp: _choice(Degree, [1, 2, 4], "pipeline-parallel degree")
    dp: _choice(Degree, [8], "data-parallel degree")
    cp: _choice(Degree, [1, 2], "context-parallel degree")
    ep: _choice(Degree, [1, 8], "expert-parallel degree")
    etp: _choice(Degree, [1], "expert tensor-parallel degree")
    vpp: _choice(Annotated[int, Field(ge=1, le=MAX_LAYERS)], [1, 2], "virtual stages per pipeline rank")
    micro_batch_size: _choice(Annotated[int, Field(ge=1, le=MAX_BATCH)], [1, 2], "sequences per micro-batch")
    recompute: _choice(Recompute, list(values(Recompute)), "activation recomputation")
    zero: _choice(ZeroStage, [1, 2, 3], "ZeRO stage")
    dp_replicate: _choice(Degree, [1, 8], "hybrid sharding: replicas of the shard group (1 = shard over every "
                          "data-parallel rank)", null="1 and one shard group per NVLink domain, where the engine "
                          "shards hybrid")
    schedule: _choice(Schedule, [SCHEDULE_1F1B, SCHEDULE_INTERLEAVED], "pipeline schedule")
    sequence_parallel: _choice(bool, [True], "Megatron sequence parallelism")
    cp_comm: _choice(CpComm, [CP_P2P], "context-parallel communication")
    moe_a2a_overlap: _choice(bool, [True], "Megatron-Core overlapped 1F1B expert all-to-all "
                             "(--overlap-moe-expert-parallel-comm; MoE with ep > 1)")
    moe_dispatcher: _choice(MoeDispatcher, [DISPATCHER_ALLTOALL, DISPATCHER_DEEPEP], "MoE token dispatcher: alltoall (NCCL) "
                            "or deepep (Megatron-Core's flex dispatcher with DeepEP, which the job must have "
                            "installed; DGX/HGX nodes of 8 GPUs)", null="alltoall alone (list deepep to search it)")
    optimizer_offload: _choice(bool, [False], "optimizer states and step on the host CPU (Megatron "
                               "--optimizer-cpu-offload, DeepSpeed offload_optimizer)",
                               null="searched where the engine runs it and the layout does not fit without it")
    activation_offload: _choice(ActivationOffload, [ACT_OFFLOAD_NONE, ACT_OFFLOAD_ATTN], "activation offload levels: "
                                "none; attn (Megatron --fine-grained-activation-offloading --offload-modules core_attn "
                                "attn_proj); attn_qkv (also qkv_linear); MoE models only: moe (expert_fc1 moe_act, "
                                "the routed experts' fc1 input and activation input); attn_moe (core_attn attn_proj "
                                "expert_fc1 moe_act). Megatron only, with recompute none",
                                null="none alone (list levels to search them)")
    memory_headroom: float = Field(DEFAULT_HEADROOM, ge=0, lt=1, description="usable memory = capacity x (1 - headroom), or less where the "
                                   "held-out upper bound of the peak asks for more (its factor f: capacity / f)", examples=[0.05])
    top_k: int = Field(3, ge=1, le=MAX_TOP_K, description="plans to keep (best + alternatives)", examples=[3])
    time_limit_s: float | None = Field(None, gt=0, le=MAX_TIME_LIMIT_S,
                                       description=f"search time limit (default {DEFAULT_TIME_LIMIT_S:g} s); the service caps it by PLANNER_SOLVE_TIME_LIMIT_S",
                                       examples=[10])
    gap_limit: float = Field(0.0, ge=0, le=MAX_GAP_LIMIT,
                             description="stop once the best plan is proven within this fraction of the optimum "
                             "(the reported gap); 0 proves optimality", examples=[0.01])
    targets: list[Target] = Field(list(values(Target)), max_length=16, description="launch artifacts to emit", examples=[list(values(Target))[:2]])
    use_all_gpus: bool = Field(True, description="only degrees whose product is num_gpus", examples=[True])
    tp_within_node: bool = Field(True, description="tensor parallelism stays inside a node", examples=[True])


# ------------------------------------------------------------------ parallelism
# The `parallelism` block (estimate / check) is the cost model's ParallelConfig itself, whose
# fields carry their bounds (cost_model/specs/inputs.py): one type for the layout from the
# request to the plan; a plan's block pastes into a check request unchanged.
Parallelism = ParallelConfig


# ------------------------------------------------------------------ whole requests

_MODEL_EX = {"name": "llama3-8b"}
_CLUSTER_EX = {"gpu": "a100-80gb", "num_gpus": 8, "gpus_per_node": 8}
_TRAINING_EX = {"global_batch_size": 32, "seq_length": 2048}
_PAR_EX = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1}
_METADATA = Field(None, description="free-form client labels; not part of the request hash nor of the solve",
                  examples=[{"team": "pretraining"}])


def _config(example: dict) -> ConfigDict:
    return ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, json_schema_extra={"examples": [example]})


_ENGINE_AT = ("search", "parallelism")  # blocks that may also name the engine (older spellings)


def one_engine(data: Any) -> Any:
    """The request's one engine, read and written in one place: the top-level `engine`, or
    where a request names it in its `search` or `parallelism` block (the older spellings),
    that; megatron where none does. Two different names are refused, naming both. The
    engine is then written into every block that carries one, so the search, the given
    configuration and every emitter price and emit for the same engine."""
    if not isinstance(data, dict):
        return data
    named = {"engine": data.get("engine")} if data.get("engine") is not None else {}
    for block in _ENGINE_AT:
        b = data.get(block)
        if isinstance(b, dict) and b.get("engine") is not None:
            named[f"{block}.engine"] = b["engine"]
        elif isinstance(b, ParallelConfig):  # a typed layout always names its engine
            named[f"{block}.engine"] = b.engine
    words = set(values(Engine))
    if len({v for v in named.values() if isinstance(v, str)}) > 1:
        said = ", ".join(f"{k}: {v}" for k, v in named.items())
        raise PydanticCustomError("spec", "{message}", {
            "field": "engine", "message": f"names two engines ({said}); a request plans, prices and emits for one, "
            "named once as `engine`", "allowed": sorted(words)})
    engine = next(iter(named.values()), ENGINE_MEGATRON)
    if engine not in words:  # a bad word: its own field's error says where it is
        return data
    out = {**data, "engine": engine}
    for block in _ENGINE_AT:
        b = out.get(block)
        if isinstance(b, dict):
            out[block] = {**b, "engine": engine}
        elif isinstance(b, ParallelConfig):
            out[block] = replace(b, engine=engine)
    return out


class _Request(_Strict):
    engine: Engine = Field(ENGINE_MEGATRON, description="the engine the request is for: it runs the plan (or the given "
                           "configuration), so it prices it and its artifacts launch it. search.engine and "
                           "parallelism.engine are older spellings of it, which must agree", examples=[ENGINE_MEGATRON])

    @model_validator(mode="before")
    @classmethod
    def _one_engine(cls, data: Any) -> Any:
        return one_engine(data)


class PlanRequest(_Request):
    model_config = _config({"model": _MODEL_EX, "cluster": _CLUSTER_EX, "training": _TRAINING_EX,
                            "search": {"top_k": 3, "time_limit_s": 10}})
    model: Model
    cluster: Cluster
    training: Training
    search: Search | None = None
    metadata: FreeForm | None = _METADATA


class EstimateRequest(_Request):
    model_config = _config({"model": _MODEL_EX, "cluster": _CLUSTER_EX, "training": _TRAINING_EX, "parallelism": _PAR_EX})
    model: Model
    cluster: Cluster
    training: Training
    parallelism: Parallelism
    metadata: FreeForm | None = _METADATA


class CheckRequest(EstimateRequest):
    model_config = _config({"model": _MODEL_EX, "cluster": _CLUSTER_EX, "training": _TRAINING_EX,
                            "parallelism": _PAR_EX, "max_slowdown": 0.1})
    search: Search | None = None
    max_slowdown: float = Field(0.10, ge=0, lt=100, description="fail when slower than the best plan by more than this fraction",
                                examples=[0.1])


REQUESTS: dict[str, type[BaseModel]] = {"plan": PlanRequest, "estimate": EstimateRequest, "check": CheckRequest}


__all__ = ["MAX_FREEFORM_DEPTH", "NESTING_TOO_DEEP", "REQUESTS", "UNION_TAGS", "CheckRequest", "Cluster",
           "EstimateRequest", "FreeForm", "GpuOverride", "Layer", "Model", "MoE", "Parallelism", "PlanRequest", "Search",
           "Shallow", "Training", "Transformer", "divisors", "spec_error_from", "validate_as"]
