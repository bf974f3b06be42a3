"""Built-in model presets.

GPT rows: Narayanan et al. SC'21 Table 1 (heads, hidden, layers; V = 51200, s = 2048, GELU
MLP 4h, learned positions, tied embeddings, dropout 0.1) and GPT-3 175B (Brown et al. 2020
Table 2.1: 96 layers, d_model 12288, 96 heads). Llama: Touvron et al. 2023 (Llama 2, Table
1 and HF configs), Llama 3 herd paper (Dubey et al. 2024, Table 3). Mixtral: Jiang et al. 2024
and the HF configs. DeepSeek-V3: DeepSeek-AI 2024 Table/§4.2 (MLA approximated by GQA with
128 heads of 128 dims; 3 dense layers, 1 shared + 256 routed experts, top-8).
"""

from __future__ import annotations

from dataclasses import replace

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


def _gpt(name: str, layers: int, hidden: int, heads: int) -> TransformerSpec:
    return TransformerSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=heads,
        ffn_hidden_size=4 * hidden,
        vocab_size=51200,
        mlp=MLP_GELU,
        norm=NORM_LAYERNORM,
        position=POSITION_LEARNED,
        tie_embeddings=True,
        max_position_embeddings=2048,
        dropout=True,
    )


def _llama(name, layers, hidden, heads, kv, ffn, vocab, ctx, theta, moe=None) -> TransformerSpec:
    return TransformerSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        mlp=MLP_SWIGLU,
        norm=NORM_RMSNORM,
        position=POSITION_ROPE,
        tie_embeddings=False,
        max_position_embeddings=ctx,
        rope_theta=theta,
        moe=moe,
    )


PRESETS: dict[str, TransformerSpec] = {
    p.name: p
    for p in (
        # Narayanan et al. SC'21 Table 1
        _gpt("gpt-1.7b", 24, 2304, 24),
        _gpt("gpt-3.6b", 30, 3072, 32),
        _gpt("gpt-7.5b", 36, 4096, 32),
        _gpt("gpt-18b", 40, 6144, 48),
        _gpt("gpt-39b", 48, 8192, 64),
        _gpt("gpt-76b", 60, 10240, 80),
        _gpt("gpt-145b", 80, 12288, 96),
        _gpt("gpt-310b", 96, 16384, 128),
        _gpt("gpt-530b", 105, 20480, 128),
        _gpt("gpt-1t", 128, 25600, 160),
        _gpt("gpt3-175b", 96, 12288, 96),
        _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 10000.0),
        _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 10000.0),
        _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 10000.0),
        _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 500000.0),
        _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 500000.0),
        _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192, 500000.0),
        _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768, 1e6, MoESpec(8, 2, 14336)),
        _llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 65536, 1e6, MoESpec(8, 2, 16384)),
        replace(_llama(
            "deepseek-v3",
            61,
            7168,
            128,
            128,
            18432,
            129280,
            4096,
            10000.0,
            MoESpec(256, 8, 2048, layer_freq=1, num_shared_experts=1, first_dense_layers=3),
        ), head_dim=128),
    )
}

# Narayanan Table 1 lists models by parameter count; these aliases match its rows.
ALIASES = {
    "gpt-18.4b": "gpt-18b",
    "gpt-39.1b": "gpt-39b",
    "gpt-76.1b": "gpt-76b",
    "gpt-145.6b": "gpt-145b",
    "gpt-310.1b": "gpt-310b",
    "gpt-529.6b": "gpt-530b",
    "gpt-1008b": "gpt-1t",
    "gpt3": "gpt3-175b",
}


def get_preset(name: str) -> TransformerSpec:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in PRESETS:
        raise SpecError("model.name", f"unknown preset {name!r}", allowed=sorted(PRESETS))
    return PRESETS[key]
