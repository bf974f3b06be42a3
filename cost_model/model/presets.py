"""Built-in model presets, with the parameter counts their model cards publish.

GPT rows: Narayanan et al. SC'21 Table 1 (heads, hidden, layers; V = 51200, s = 2048, GELU
MLP 4h, learned positions, tied embeddings, dropout 0.1) and GPT-3 175B (Brown et al. 2020
Table 2.1: 96 layers, d_model 12288, 96 heads). Llama: Touvron et al. 2023 (Llama 2, Table
1 and HF configs), Llama 3 herd paper (Dubey et al. 2024, Table 3). Mixtral: Jiang et al. 2024
and the HF configs. The MoE/long-context rows below carry the released config.json values
of their Hugging Face repositories (tests/cost_model/data/hf/ holds the same fields, and a
test checks each preset equals its imported config):
- deepseek-v3: deepseek-ai/DeepSeek-V3 (DeepSeek-AI 2024, arXiv 2412.19437 §2, §4.2): MLA
  (q_lora 1536, kv_lora 512, 128+64 qk, 128 v), 3 dense blocks, 1 shared + 256 routed
  experts top-8, one MTP module.
- kimi-k2: moonshotai/Kimi-K2-Instruct (arXiv 2507.20534): the DeepSeek-V3 design with 64
  heads, 384 experts, 1 dense block, no MTP module.
- qwen3-*: Qwen/Qwen3-235B-A22B, Qwen/Qwen3-30B-A3B (Qwen3 report arXiv 2505.09388 Table 2).
- gpt-oss-*: openai/gpt-oss-120b / -20b (model card arXiv 2508.10925 Table 1): alternating
  128-token sliding / full blocks, attention sinks, biases, the experts' gate/up clamped at
  7.0 (config.json swiglu_limit).
- llama4-*: meta-llama/Llama-4-Scout-17B-16E / Llama-4-Maverick-17B-128E (text model):
  chunked attention (8192) on 3 of 4 blocks, one shared expert, Maverick MoE on odd blocks.
- gemma3-27b: google/gemma-3-27b-pt text_config (Gemma 3 report arXiv 2503.19786): 5 sliding
  (1024) blocks per full one, tied embeddings, QK-norm, sandwich norms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cost_model.model import flops
from cost_model.model.attention import CHUNKED, FULL, SLIDING
from cost_model.specs.errors import SpecError, close_match
from cost_model.specs.inputs import MLASpec, MoESpec, TransformerSpec
from cost_model.specs.vocab import (
    MLP_GELU,
    MLP_SWIGLU,
    NORM_LAYERNORM,
    NORM_RMSNORM,
    POSITION_LEARNED,
    POSITION_ROPE,
    ROUTER_SIGMOID,
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


def _deepseek(name, heads, experts, dense, vocab, ctx, theta, mtp, groups, scale) -> TransformerSpec:
    """DeepSeek-V3 layout (DeepseekV3Config): 61 blocks of h 7168, dense FFN 18432, experts
    of 2048, top-8, one shared expert, sigmoid router with e_score_correction_bias, its
    normalised weights scaled by routed_scaling_factor; DeepSeek-V3 routes within 4 of 8
    expert groups (n_group 8, topk_group 4), Kimi-K2 over all (one group)."""
    moe = MoESpec(experts, 8, 2048, num_shared_experts=1, first_dense_layers=dense, router_bias=True,
                  score_function=ROUTER_SIGMOID, num_groups=groups, group_top_k=groups // 2, topk_scaling_factor=scale)
    return replace(
        _llama(name, 61, 7168, heads, heads, 18432, vocab, ctx, theta, moe),
        head_dim=128,  # v_head_dim; the projections follow `mla`
        mla=MLASpec(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, q_lora_rank=1536),
        num_nextn_predict_layers=mtp,
    )


def _qwen3_moe(name, layers, hidden, heads, kv, ffn, expert_ffn) -> TransformerSpec:
    """Qwen3-MoE: every block MoE (decoder_sparse_step 1), 128 experts top-8, no shared
    expert, head_dim 128, QK-norm, vocab 151936, untied."""
    moe = MoESpec(128, 8, expert_ffn)
    return replace(_llama(name, layers, hidden, heads, kv, ffn, 151936, 40960, 1e6, moe), head_dim=128, qk_norm=True)


def _gpt_oss(name, layers, experts) -> TransformerSpec:
    """GPT-OSS: h 2880, 64 query heads of 64, 8 KV heads, experts of 2880 top-4 with
    biases, alternating sliding (128) / full blocks starting with sliding, sinks."""
    moe = MoESpec(experts, 4, 2880, router_bias=True, expert_bias=True)
    return replace(
        _llama(name, layers, 2880, 64, 8, 2880, 201088, 131072, 150000.0, moe),
        head_dim=64,
        sliding_window=128,
        layer_types=tuple(SLIDING if (i + 1) % 2 else FULL for i in range(layers)),
        attention_sinks=True,
        qkv_bias=True,
        out_proj_bias=True,
        swiglu_limit=7.0,  # openai/gpt-oss-120b and -20b config.json swiglu_limit
    )


def _llama4(name, experts, step, ctx) -> TransformerSpec:
    """Llama 4 text model: 48 blocks of h 5120, 40 heads / 8 KV of 128, experts of 8192
    top-1 + one shared, dense blocks of 16384; MoE on blocks step-1, 2*step-1, ...; every
    4th block NoPE with full attention, the others chunked (8192)."""
    moe = MoESpec(experts, 1, 8192, layer_freq=step, num_shared_experts=1, moe_layers=tuple(range(step - 1, 48, step)))
    return replace(
        _llama(name, 48, 5120, 40, 8, 16384, 202048, ctx, 500000.0, moe),
        head_dim=128,
        attention_chunk_size=8192,
        layer_types=tuple(FULL if (i + 1) % 4 == 0 else CHUNKED for i in range(48)),
    )


def _gemma3(name, layers, hidden, heads, kv, head_dim, ffn, window) -> TransformerSpec:
    """Gemma 3: gated GELU MLP, tied embeddings (vocab 262208), 4 norms per block, QK-norm,
    sliding_window_pattern 6 (blocks 5, 11, ... full)."""
    return replace(
        _llama(name, layers, hidden, heads, kv, ffn, 262208, 131072, 1e6),
        tie_embeddings=True,
        head_dim=head_dim,
        qk_norm=True,
        block_norms=4,
        sliding_window=window,
        layer_types=tuple(SLIDING if (i + 1) % 6 else FULL for i in range(layers)),
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
        _deepseek("deepseek-v3", heads=128, experts=256, dense=3, vocab=129280, ctx=163840, theta=10000.0, mtp=1,
                  groups=8, scale=2.5),
        _deepseek("kimi-k2", heads=64, experts=384, dense=1, vocab=163840, ctx=131072, theta=50000.0, mtp=0,
                  groups=0, scale=2.827),
        _qwen3_moe("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 1536),
        _qwen3_moe("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 768),
        _gpt_oss("gpt-oss-120b", 36, 128),
        _gpt_oss("gpt-oss-20b", 24, 32),
        _llama4("llama4-scout", experts=16, step=1, ctx=10485760),
        _llama4("llama4-maverick", experts=128, step=2, ctx=1048576),
        _gemma3("gemma3-27b", 62, 5376, 32, 16, 128, 21504, window=1024),
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
        raise SpecError("model.name", f"unknown preset {name!r}", allowed=sorted(PRESETS),
                         suggestion=close_match(name, [*PRESETS, *ALIASES]))
    return PRESETS[key]


# --------------------------------------------------------------------------- published counts


@dataclass(frozen=True)
class PublishedCounts:
    """Parameter counts a model card or paper prints, as printed (their precision is the
    tolerance they state). `active_counts_input_embedding`: whether that card's active
    count includes the input embedding table (see flops' counting convention: most do;
    GPT-OSS, DeepSeek-V3 and Kimi-K2 reproduce only without it)."""

    total_params: float
    active_params: float
    source: str
    active_counts_input_embedding: bool = True


PUBLISHED: dict[str, PublishedCounts] = {
    "deepseek-v3": PublishedCounts(
        671e9, 37e9, "arXiv 2412.19437 abstract and §4.2 (671B total, 37B activated; MTP's 14B apart per the HF card)", False
    ),
    "kimi-k2": PublishedCounts(1.04e12, 32e9, "arXiv 2507.20534 abstract / model card (1.04T total, 32B activated)", False),
    "qwen3-235b-a22b": PublishedCounts(235e9, 22e9, "Qwen/Qwen3-235B-A22B model card; arXiv 2505.09388 Table 2"),
    "qwen3-30b-a3b": PublishedCounts(30.5e9, 3.3e9, "Qwen/Qwen3-30B-A3B model card (30.5B total, 3.3B activated)"),
    "gpt-oss-120b": PublishedCounts(116.83e9, 5.13e9, "arXiv 2508.10925 Table 1", False),
    "gpt-oss-20b": PublishedCounts(20.91e9, 3.61e9, "arXiv 2508.10925 Table 1", False),
    "mixtral-8x7b": PublishedCounts(46.7e9, 12.9e9, "Jiang et al. 2024 (arXiv 2401.04088) §2.1"),
    "mixtral-8x22b": PublishedCounts(141e9, 39e9, "mistral.ai Mixtral 8x22B announcement / model card"),
    "llama4-scout": PublishedCounts(109e9, 17e9, "meta-llama/Llama-4-Scout-17B-16E model card (whole multimodal checkpoint)"),
    "llama4-maverick": PublishedCounts(400e9, 17e9, "meta-llama/Llama-4-Maverick-17B-128E model card (whole multimodal checkpoint)"),
    "gemma3-27b": PublishedCounts(27e9, 27e9, "google/gemma-3-27b-pt model card (27B; dense)"),
}


def param_counts(m: TransformerSpec) -> dict[str, int]:
    """Computed counts of any transformer in the cards' convention (flops.total_params /
    active_params: embeddings counted, MTP apart), plus the MTP modules' own parameters
    and the active count without the input embedding (GPT-OSS's rule)."""
    return {
        "total_params": int(flops.total_params(m)),
        "active_params": int(flops.active_params(m)),
        "active_params_without_input_embedding": int(flops.active_params(m, input_embedding=False)),
        "mtp_params": int(flops.mtp_params(m)),
    }
