"""Hugging Face `config.json` -> TransformerSpec.

Field names and defaults per huggingface/transformers' configuration classes
(src/transformers/models/<family>/configuration_<family>.py):
- LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config / Phi3Config: hidden_size,
  num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size,
  vocab_size, max_position_embeddings, rope_theta | rope_parameters, tie_word_embeddings,
  head_dim, sliding_window (Qwen: only with use_sliding_window).
- MixtralConfig: num_local_experts, num_experts_per_tok.
- DeepseekV3Config (commit 001f85b3; Kimi-K2 ships the same fields as model_type
  "kimi_k2"): n_routed_experts, n_shared_experts, num_experts_per_tok,
  moe_intermediate_size, first_k_dense_replace, moe_layer_freq (MoE iff
  i >= first_k_dense_replace and i % moe_layer_freq == 0), q_lora_rank (null: plain q
  projection), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
  num_nextn_predict_layers (the released checkpoints' field; DeepSeek-V3 §2.2),
  topk_method "noaux_tc" (a per-expert e_score_correction_bias).
- Qwen3MoeConfig (commit 008e5743): num_experts, num_experts_per_tok,
  moe_intermediate_size, decoder_sparse_step (MoE iff i not in mlp_only_layers and
  (i + 1) % decoder_sparse_step == 0), mlp_only_layers; q_norm/k_norm on head_dim.
- GptOssConfig (commit 02b8f42b): num_local_experts, num_experts_per_tok (the released
  config.json also writes experts_per_token), sliding_window 128, layer_types (default:
  sliding on even blocks, full on odd), attention_bias True (q/k/v/o), `sinks` per head,
  router and expert biases, swiglu_limit (the clamp of the experts' gate/up; missing: 7.0,
  the limit transformers' GptOssExperts hard-codes).
- Llama4Config / Llama4TextConfig (commit 008e5743): sizes under text_config;
  intermediate_size (experts and the shared expert) vs intermediate_size_mlp (dense
  blocks); moe_layers or interleave_moe_layer_step (MoE blocks step-1, 2*step-1, ...);
  one shared expert per MoE block; no_rope_layers (1: RoPE block with chunked attention of
  attention_chunk_size, 0: NoPE block with full attention; default every 4th block NoPE);
  use_qk_norm is a weightless L2 norm (no parameters).
- Gemma3Config / Gemma3TextConfig (commit 008f5c8c): sizes under text_config, saved as a
  diff against the text class's defaults (so missing fields take them: vocab_size 262208,
  head_dim 256, sliding_window 4096, sliding_window_pattern 6, tie_word_embeddings True);
  blocks i with (i + 1) % pattern != 0 slide; four norms per block and q/k norms.
- Glm4MoeConfig (commit 008c726d; the released GLM-4.5 config.json uses DeepSeek-V3's
  n_routed_experts / n_shared_experts / first_k_dense_replace): partial_rotary_factor
  (rotation only: no parameters), attention_bias on q/k/v only, use_qk_norm,
  num_nextn_predict_layers.
- GPT2Config: n_embd, n_layer, n_head, n_inner, n_positions.
Unknown fields are ignored; a missing required one is named by its path
(`model.hf_config.text_config.hidden_size`). Blocks other than softmax attention + MLP
(linear attention, Mamba, DeepSeek Sparse Attention, recurrent models) are refused by the
field that shows them (_OTHER_MIXER_FIELDS), not priced as attention.
"""

from __future__ import annotations

from typing import Any

from cost_model.model.attention import CHUNKED, FULL, LAYER_TYPES, SLIDING
from cost_model.specs import vocab as V
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import MLASpec, MoESpec, TransformerSpec

# transformers' PretrainedConfig ties embeddings by default; these classes default to untied
_UNTIED_BY_DEFAULT = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v3", "deepseek_v2",
    "kimi_k2", "gpt_oss", "llama4", "llama4_text", "phi3", "glm4_moe",
}

# Class defaults of nested text configs, which checkpoints save as a diff against them
# (Gemma3TextConfig.__init__ commit 008f5c8c; Llama4TextConfig commit 008e5743). The three
# fields that set the model's size (hidden_size, num_hidden_layers, intermediate_size) are
# never taken from a default: a config without them is refused with the field's path.
_NESTED_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "rope_theta": 1_000_000.0, "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
    "llama4_text": {
        "vocab_size": 202048, "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "num_experts_per_tok": 1, "num_local_experts": 16,
        "interleave_moe_layer_step": 1, "no_rope_layer_interval": 4, "attention_chunk_size": 8192,
        "rope_theta": 500000.0,
    },
}

_NESTED = {"gemma3": "gemma3_text", "llama4": "llama4_text"}


class _Cfg:
    """A config dict and the path its fields are named by in errors."""

    def __init__(self, d: dict, path: str):
        self.d, self.path = d, path

    def get(self, name: str, default: Any = None) -> Any:
        v = self.d.get(name)
        return default if v is None else v

    def has(self, name: str) -> bool:
        return self.d.get(name) is not None

    def req(self, *names: str) -> Any:
        for n in names:
            if self.d.get(n) is not None:
                return self.d[n]
        raise SpecError(f"{self.path}.{names[0]}", "is required", allowed=list(names))


def _rope_theta(c: _Cfg) -> float | None:
    if c.has("rope_theta"):
        return float(c.get("rope_theta"))
    params = c.get("rope_parameters") or c.get("rope_scaling") or {}
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    return None


def from_hf_config(cfg: dict, name: str | None = None) -> TransformerSpec:
    model_type = str(cfg.get("model_type", "")).lower()
    archs = " ".join(cfg.get("architectures") or []).lower()
    display = name or cfg.get("_name_or_path") or model_type or "hf-model"
    if model_type == "gpt2" or "gpt2" in archs or "n_embd" in cfg:
        return _gpt2(_Cfg(cfg, "model.hf_config"), display)
    c = _Cfg(cfg, "model.hf_config")
    if model_type in _NESTED or (isinstance(cfg.get("text_config"), dict) and not c.has("hidden_size")):
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise SpecError("model.hf_config.text_config", "is required", allowed=["text_config"])
        text_type = str(text.get("model_type") or _NESTED.get(model_type, "")).lower()
        merged = dict(_NESTED_DEFAULTS.get(text_type, {}))
        merged.update(text)  # an explicit null stays null (attention_chunk_size: null = no chunking)
        if "tie_word_embeddings" in cfg and "tie_word_embeddings" not in text:
            merged["tie_word_embeddings"] = cfg["tie_word_embeddings"]  # the outer class's flag
        c = _Cfg(merged, "model.hf_config.text_config")
        model_type = text_type
    return _decoder(c, model_type, display)


def _gpt2(c: _Cfg, display: str) -> TransformerSpec:
    hidden = int(c.req("n_embd", "hidden_size"))
    heads = int(c.req("n_head", "num_attention_heads"))
    return TransformerSpec(
        name=display,
        num_layers=int(c.req("n_layer", "num_hidden_layers")),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=heads,
        ffn_hidden_size=int(c.get("n_inner") or 4 * hidden),
        vocab_size=int(c.req("vocab_size")),
        mlp=V.MLP_GELU,
        norm=V.NORM_LAYERNORM,
        position=V.POSITION_LEARNED,
        tie_embeddings=bool(c.get("tie_word_embeddings", True)),
        max_position_embeddings=int(c.get("n_positions") or c.get("n_ctx") or 1024),
        dropout=float(c.get("resid_pdrop", 0.0) or 0.0) > 0,
    )


# Blocks other than softmax attention + MLP, which a TransformerSpec would price as attention:
# a config carrying one of these is refused by the field that shows it, rather than planned as
# another model. Field names per transformers' configuration classes (Qwen3NextConfig,
# NemotronHConfig, JambaConfig, FalconH1Config, MiniMaxConfig attn_type_list: 0 = lightning
# linear attention, 1 = softmax; DeepseekV32Config) and the recurrent families' model_type.
_OTHER_MIXER_FIELDS = (
    ("linear_num_value_heads", "Gated DeltaNet linear-attention blocks (Qwen3-Next)"),
    ("hybrid_override_pattern", "Mamba-2 blocks (Nemotron-H)"),
    ("attn_layer_period", "Mamba blocks (Jamba)"),
    ("mamba_d_ssm", "Mamba-2 blocks (Falcon-H1)"),
    ("index_topk", "DeepSeek Sparse Attention: an indexer and top-k keys per query (DeepSeek-V3.2)"),
)
_RECURRENT_MODEL_TYPES = frozenset({"mamba", "mamba2", "rwkv", "rwkv5", "rwkv6", "rwkv7", "recurrent_gemma", "xlstm",
                                    "zamba", "zamba2", "bamba"})
_NOT_PRICED = ("; the planner prices softmax-attention transformers (give the blocks as a layer list, "
               "model.kind='layers', to plan it)")


def _other_mixers(c: _Cfg, model_type: str) -> None:
    if model_type in _RECURRENT_MODEL_TYPES:
        raise SpecError(f"{c.path}.model_type", f"{model_type!r} is a recurrent / state-space model{_NOT_PRICED}")
    for field, what in _OTHER_MIXER_FIELDS:
        if c.has(field):
            raise SpecError(f"{c.path}.{field}", f"shows {what}, which are not priced{_NOT_PRICED}")
    kinds = c.get("attn_type_list")
    if isinstance(kinds, list) and 0 in kinds:
        raise SpecError(f"{c.path}.attn_type_list", "has lightning (linear) attention blocks (0; MiniMax-Text-01), "
                        f"which are not priced{_NOT_PRICED}")
    types = c.get("layer_types")
    for i, t in enumerate(types if isinstance(types, (list, tuple)) else ()):
        if t not in LAYER_TYPES:  # whether or not a window is set (Qwen3-Next 'linear_attention')
            raise SpecError(f"{c.path}.layer_types[{i}]", f"unknown attention kind {t!r}: not priced{_NOT_PRICED}",
                            allowed=list(LAYER_TYPES))


def _decoder(c: _Cfg, model_type: str, display: str) -> TransformerSpec:
    _other_mixers(c, model_type)
    hidden = int(c.req("hidden_size"))
    heads = int(c.req("num_attention_heads"))
    layers = int(c.req("num_hidden_layers"))
    vocab = int(c.req("vocab_size"))
    llama4 = model_type.startswith("llama4")
    gemma = model_type.startswith("gemma")
    gpt_oss = model_type == "gpt_oss"
    moe = _moe(c, model_type, layers)
    if llama4:  # dense blocks use intermediate_size_mlp; intermediate_size is the experts'
        dense_ffn = int(c.get("intermediate_size_mlp") or c.req("intermediate_size"))
    elif moe is not None and not c.has("intermediate_size"):
        dense_ffn = moe.ffn_hidden_size  # every block is MoE (Qwen3-MoE, GPT-OSS): unused
    else:
        dense_ffn = int(c.req("intermediate_size"))
    sliding, layer_types, chunk = _attention_pattern(c, model_type, layers)
    mla = _mla(c)
    attn_bias = bool(c.get("attention_bias", gpt_oss))
    # families read here state their biases; another config without attention_bias keeps
    # the spec's default rule (biases iff LayerNorm), as before this import knew families
    known = model_type in _UNTIED_BY_DEFAULT or model_type.startswith("gemma") or c.has("attention_bias")
    return TransformerSpec(
        name=display,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=int(c.get("num_key_value_heads") or heads),
        ffn_hidden_size=dense_ffn,
        vocab_size=vocab,
        # Llama-family configs (Llama, Mistral, Qwen, Mixtral, Gemma, DeepSeek, GPT-OSS,
        # Phi-3, GLM) all use a gated MLP (gate, up, down) whatever the activation; only the
        # cost of the activation itself differs, which the model ignores.
        mlp=V.MLP_SWIGLU,
        norm=V.NORM_RMSNORM if (c.has("rms_norm_eps") or gemma or llama4 or gpt_oss) else V.NORM_LAYERNORM,
        position=V.POSITION_ROPE,
        tie_embeddings=bool(c.get("tie_word_embeddings", model_type not in _UNTIED_BY_DEFAULT)),
        max_position_embeddings=int(c.get("max_position_embeddings") or 4096),
        moe=moe,
        # MLA: head_dim is not a projection width (attention.projections reads c.mla); the
        # v head width keeps kv_channels meaningful for per-head terms
        head_dim=mla.v_head_dim if mla else (int(c.get("head_dim")) if c.has("head_dim") else None),
        rope_theta=_rope_theta(c),
        mla=mla,
        num_nextn_predict_layers=int(c.get("num_nextn_predict_layers", 0)),
        sliding_window=sliding,
        attention_chunk_size=chunk,
        layer_types=layer_types,
        attention_sinks=gpt_oss,  # GptOssAttention.sinks: one logit per head
        # Llama 4's use_qk_norm is a weightless L2 norm: no parameters
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text") or (bool(c.get("use_qk_norm", False)) and not llama4),
        # GLM-4.5 / Qwen2 put biases on q, k, v only; GPT-OSS on all four (attention_bias)
        qkv_bias=(attn_bias or model_type in ("qwen2", "qwen2_moe")) if known else None,
        out_proj_bias=(attn_bias and model_type != "glm4_moe") if known else None,
        mlp_bias=bool(c.get("mlp_bias", False)) if known or c.has("mlp_bias") else None,
        block_norms=4 if model_type in ("gemma2", "gemma3_text") else 2,
        # GPT-OSS clamps both gate/up halves: the released config.json writes swiglu_limit 7.0
        # (GptOssConfig keeps it as an extra attribute); GptOssExperts hard-codes limit 7.0
        swiglu_limit=float(c.get("swiglu_limit", 7.0)) if gpt_oss else None,  # Gemma 2/3: pre- and post-norms around attention and MLP
    )


def _mla(c: _Cfg) -> MLASpec | None:
    if not c.has("kv_lora_rank"):
        return None
    q_rank = c.get("q_lora_rank")
    return MLASpec(
        kv_lora_rank=int(c.req("kv_lora_rank")),
        qk_nope_head_dim=int(c.req("qk_nope_head_dim")),
        qk_rope_head_dim=int(c.req("qk_rope_head_dim")),
        v_head_dim=int(c.req("v_head_dim")),
        q_lora_rank=int(q_rank) if q_rank else None,
    )


def _moe(c: _Cfg, model_type: str, layers: int) -> MoESpec | None:
    n_experts = c.get("num_local_experts") or c.get("n_routed_experts") or c.get("num_experts")
    if not n_experts:
        return None
    n_experts = int(n_experts)
    top_k = int(c.req("num_experts_per_tok", "experts_per_token"))
    llama4 = model_type.startswith("llama4")
    ffn = int(c.req("intermediate_size") if llama4 else (c.get("moe_intermediate_size") or c.req("intermediate_size")))
    first_dense = int(c.get("first_k_dense_replace", 0))
    if llama4:
        step = int(c.get("interleave_moe_layer_step", 1))
        moe_layers = tuple(c.get("moe_layers") or range(step - 1, layers, step))
        shared, freq = 1, step
    elif (c.has("decoder_sparse_step") or c.has("mlp_only_layers")) and not (
        c.has("first_k_dense_replace") or c.has("moe_layer_freq")
    ):
        step = int(c.get("decoder_sparse_step", 1))
        skip = set(c.get("mlp_only_layers") or [])
        moe_layers = tuple(i for i in range(layers) if i not in skip and (i + 1) % step == 0)
        shared, freq = int(c.get("n_shared_experts", 0)), step
    else:
        freq = int(c.get("moe_layer_freq", 1))
        moe_layers = tuple(i for i in range(layers) if i >= first_dense and i % freq == 0)
        shared = int(c.get("n_shared_experts", 0))
    shared_ffn = c.get("shared_expert_intermediate_size")
    if shared_ffn and not shared:
        shared = 1  # Qwen2-MoE: one shared expert of shared_expert_intermediate_size
    return MoESpec(
        num_experts=n_experts,
        top_k=top_k,
        ffn_hidden_size=ffn,
        layer_freq=freq,
        num_shared_experts=shared,
        first_dense_layers=first_dense,
        moe_layers=moe_layers,
        shared_ffn_hidden_size=int(shared_ffn) if shared_ffn else None,
        # DeepSeek-V3 noaux_tc and GLM-4.5 routers carry e_score_correction_bias; GPT-OSS a Linear bias
        router_bias=model_type == "gpt_oss" or c.get("topk_method") == "noaux_tc" or model_type == "glm4_moe",
        expert_bias=model_type == "gpt_oss",
        **_router(c, model_type),
    )


def _router(c: _Cfg, model_type: str) -> dict:
    """How the router scores and picks (MoESpec.score_function ...): DeepseekV3Config
    scoring_func (Kimi-K2 the same), Glm4MoeTopkRouter's sigmoid (no field), n_group /
    topk_group (one group is plain top-k), routed_scaling_factor, norm_topk_prob (Mixtral,
    GPT-OSS: normalised by construction; Qwen2/3-MoE and DeepSeek read the field)."""
    sigmoid = str(c.get("scoring_func", "")).lower() == V.ROUTER_SIGMOID or model_type == "glm4_moe"
    groups, pick = int(c.get("n_group") or 0), int(c.get("topk_group") or 0)
    scale = c.get("routed_scaling_factor")
    return dict(
        score_function=V.ROUTER_SIGMOID if sigmoid else V.ROUTER_SOFTMAX,
        normalize_top_k=bool(c.get("norm_topk_prob", True)),
        num_groups=groups if groups > 1 else 0,
        group_top_k=pick if groups > 1 else 0,
        topk_scaling_factor=float(scale) if scale and float(scale) != 1.0 else None,
    )


def _attention_pattern(c: _Cfg, model_type: str, layers: int) -> tuple[int | None, tuple[str, ...] | None, int | None]:
    """(sliding_window, layer_types, attention_chunk_size) per the family's rule."""
    if model_type.startswith("llama4"):
        chunk = c.get("attention_chunk_size")
        if not chunk:
            return None, None, None
        flags = c.get("no_rope_layers") or [
            int((i + 1) % int(c.get("no_rope_layer_interval", 4)) != 0) for i in range(layers)
        ]
        types = tuple(c.get("layer_types") or [CHUNKED if f else FULL for f in flags[:layers]])
        return None, _check_types(c, types, layers), int(chunk)
    if c.has("use_sliding_window") and not c.get("use_sliding_window"):
        return None, None, None  # Qwen2/Qwen3: sliding_window is ignored unless enabled
    w = c.get("sliding_window")
    if not w:
        return None, None, None
    if c.has("layer_types"):
        return int(w), _check_types(c, tuple(c.get("layer_types")), layers), None
    if model_type == "gpt_oss":
        return int(w), tuple(SLIDING if (i + 1) % 2 else FULL for i in range(layers)), None
    pattern = c.get("sliding_window_pattern")
    if pattern:  # Gemma 3: (pattern - 1) sliding blocks, then one full
        return int(w), tuple(SLIDING if (i + 1) % int(pattern) else FULL for i in range(layers)), None
    return int(w), None, None  # every block slides (Mistral-7B-v0.1, Phi-3-mini)


def _check_types(c: _Cfg, types: tuple[str, ...], layers: int) -> tuple[str, ...]:
    """One kind per block (each kind was checked by _other_mixers)."""
    if len(types) < layers:
        raise SpecError(f"{c.path}.layer_types", f"has {len(types)} entries for {layers} layers", allowed=list(LAYER_TYPES))
    return tuple(types[:layers])
