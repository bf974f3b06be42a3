"""Hugging Face `config.json` -> TransformerSpec.

Field names per transformers' configuration classes: LlamaConfig / MistralConfig /
Qwen2Config (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
intermediate_size, vocab_size, max_position_embeddings, rope_theta | rope_parameters,
tie_word_embeddings, head_dim), MixtralConfig (num_local_experts, num_experts_per_tok),
DeepseekV3Config (n_routed_experts, num_experts_per_tok, moe_intermediate_size,
n_shared_experts, first_k_dense_replace, moe_layer_freq), GPT2Config (n_embd, n_layer,
n_head, n_inner, n_positions).
"""

from __future__ import annotations

from typing import Any

from .errors import SpecError
from .specs import MoESpec, TransformerSpec
from .vocab import (
    MLP_GELU,
    MLP_SWIGLU,
    NORM_LAYERNORM,
    NORM_RMSNORM,
    POSITION_LEARNED,
    POSITION_ROPE,
)

# transformers' PretrainedConfig ties embeddings by default; these classes default to untied
_UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v3", "deepseek_v2"}


def _req(cfg: dict, *names: str) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    raise SpecError(f"model.hf_config.{names[0]}", "is required", allowed=list(names))


def _rope_theta(cfg: dict) -> float | None:
    if cfg.get("rope_theta") is not None:
        return float(cfg["rope_theta"])
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    return None


def from_hf_config(cfg: dict, name: str | None = None) -> TransformerSpec:
    model_type = str(cfg.get("model_type", "")).lower()
    archs = " ".join(cfg.get("architectures") or []).lower()
    if model_type == "gpt2" or "gpt2" in archs or "n_embd" in cfg:
        hidden = int(_req(cfg, "n_embd", "hidden_size"))
        heads = int(_req(cfg, "n_head", "num_attention_heads"))
        return TransformerSpec(
            name=name or cfg.get("_name_or_path") or "gpt2",
            num_layers=int(_req(cfg, "n_layer", "num_hidden_layers")),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=heads,
            ffn_hidden_size=int(cfg.get("n_inner") or 4 * hidden),
            vocab_size=int(_req(cfg, "vocab_size")),
            mlp=MLP_GELU,
            norm=NORM_LAYERNORM,
            position=POSITION_LEARNED,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
            max_position_embeddings=int(cfg.get("n_positions") or cfg.get("n_ctx") or 1024),
            dropout=float(cfg.get("resid_pdrop", 0.0) or 0.0) > 0,
        )
    hidden = int(_req(cfg, "hidden_size"))
    heads = int(_req(cfg, "num_attention_heads"))
    moe = None
    n_experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts")
    if n_experts:
        moe = MoESpec(
            num_experts=int(n_experts),
            top_k=int(_req(cfg, "num_experts_per_tok")),
            ffn_hidden_size=int(cfg.get("moe_intermediate_size") or _req(cfg, "intermediate_size")),
            layer_freq=int(cfg.get("moe_layer_freq") or cfg.get("decoder_sparse_step") or 1),
            num_shared_experts=int(cfg.get("n_shared_experts") or 0),
            first_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
        )
    head_dim = cfg.get("head_dim")
    if head_dim is None and "qk_nope_head_dim" in cfg:  # DeepSeek MLA: approximate by its qk head dim
        head_dim = int(cfg["qk_nope_head_dim"]) + int(cfg.get("qk_rope_head_dim", 0))
    return TransformerSpec(
        name=name or cfg.get("_name_or_path") or model_type or "hf-model",
        num_layers=int(_req(cfg, "num_hidden_layers")),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        ffn_hidden_size=int(_req(cfg, "intermediate_size")),
        vocab_size=int(_req(cfg, "vocab_size")),
        # Llama-family configs (Llama, Mistral, Qwen2, Mixtral, Gemma, DeepSeek) all use a
        # gated MLP (gate, up, down) whatever the activation; only the cost of the
        # activation itself differs, which the model ignores.
        mlp=MLP_SWIGLU,
        norm=NORM_RMSNORM if "rms_norm_eps" in cfg else NORM_LAYERNORM,
        position=POSITION_ROPE,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", model_type not in _UNTIED_BY_DEFAULT)),
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 4096),
        moe=moe,
        head_dim=int(head_dim) if head_dim else None,
        rope_theta=_rope_theta(cfg),
    )
