"""Total and active parameters of today's models against their published counts.

The configs under data/hf/ carry the field values of the released config.json files (the
Hugging Face repositories named in each row). References are the counts the model cards
and papers print; each tolerance is 1% unless the row says why the card's own precision
(or scope) is wider. Convention (cost_model.model.flops): total = every unique parameter of the
main model, embeddings counted, MTP modules apart; active = the same with top_k routed
experts, input embedding counted (the majority of the cards); the cards that leave the
input embedding out of "active" (GPT-OSS, DeepSeek-V3, Kimi-K2) are checked with
`input_embedding=False`, as their PublishedCounts rows say.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cost_model.model import flops
from cost_model.model.hf_import import from_hf_config
from cost_model.model.presets import PRESETS, PUBLISHED, get_preset, param_counts

DATA = Path(__file__).parent / "data" / "hf"


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


# preset, fixture, total tolerance, active tolerance (relative)
ROWS = [
    ("deepseek-v3", "deepseek_v3", 0.01, 0.011),  # 36.63B vs "37B": inside the card's 0.5B rounding
    ("kimi-k2", "kimi_k2", 0.015, 0.01),  # 1.026T vs the report's 1.04T (see test_kimi_total_gap)
    ("qwen3-235b-a22b", "qwen3_235b_a22b", 0.01, 0.01),
    ("qwen3-30b-a3b", "qwen3_30b_a3b", 0.01, 0.017),  # 3.353B printed as "3.3B" (truncated)
    ("gpt-oss-120b", "gpt_oss_120b", 0.01, 0.01),
    ("gpt-oss-20b", "gpt_oss_20b", 0.01, 0.01),
    ("mixtral-8x22b", "mixtral_8x22b", 0.01, 0.01),
    ("llama4-scout", "llama4_scout", 0.012, 0.011),  # card counts the vision encoder; 17.17B printed "17B"
    ("llama4-maverick", "llama4_maverick", 0.01, 0.011),  # 17.19B printed "17B"
    ("gemma3-27b", "gemma3_27b", 0.01, 0.01),
]


def _active(m, pub) -> float:
    return flops.active_params(m, input_embedding=pub.active_counts_input_embedding)


@pytest.mark.parametrize("preset,fixture,tol_total,tol_active", ROWS)
def test_imported_config_matches_published_counts(preset, fixture, tol_total, tol_active):
    m = from_hf_config(load(fixture))
    pub = PUBLISHED[preset]
    assert abs(flops.total_params(m) / pub.total_params - 1) < tol_total
    assert abs(_active(m, pub) / pub.active_params - 1) < tol_active


@pytest.mark.parametrize("preset,fixture,tol_total,tol_active", ROWS)
def test_preset_counts_equal_imported_config(preset, fixture, tol_total, tol_active):
    """The preset rows and the config.json import are written separately: same model."""
    a, b = get_preset(preset), from_hf_config(load(fixture))
    assert param_counts(a) == param_counts(b)
    assert [flops._is_moe(a, i) for i in range(a.num_layers)] == [flops._is_moe(b, i) for i in range(b.num_layers)]
    assert flops.model_flops_per_step(a, 8, 4096, causal=True) == pytest.approx(
        flops.model_flops_per_step(b, 8, 4096, causal=True), rel=1e-12
    )


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_published_row_has_a_preset_and_rounds_to_the_printed_figure(name):
    m, pub = PRESETS[name], PUBLISHED[name]
    # The printed active count's last digit (37B, 3.3B, 5.13B) bounds the rounding error:
    # within 1% or within one unit of the last printed digit.
    digits = len(f"{pub.active_params / 1e9:g}".split(".")[-1]) if "." in f"{pub.active_params / 1e9:g}" else 0
    unit = 10.0 ** (-digits) * 1e9
    assert abs(_active(m, pub) - pub.active_params) < max(0.01 * pub.active_params, unit)


def test_deepseek_v3_hand_count():
    """DeepSeek-V3, written out from the config (h 7168, 61 blocks, 3 dense):
    MLA per block: q_a 7168*1536 + norm 1536 + q_b 1536*128*192 + kv_a 7168*(512+64) + norm 512
      + kv_b 512*128*(128+128) + o 128*128*7168 = 187,107,328 (the issue's "about 187M");
    dense FFN 3*7168*18432; expert 3*7168*2048; MoE block: 257 experts + router 256*7168 + 256
    bias; two RMSNorms per block; embeddings 2*129280*7168 + final norm."""
    mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert mla == 187_107_328
    norms = 2 * 7168
    dense = mla + 3 * 7168 * 18432 + norms
    expert = 3 * 7168 * 2048
    router = 256 * 7168 + 256
    moe_total = mla + 257 * expert + router + norms
    moe_active = mla + 9 * expert + router + norms
    emb = 129280 * 7168
    total = 3 * dense + 58 * moe_total + 2 * emb + 7168
    m = get_preset("deepseek-v3")
    assert flops.block_params(m, False) == dense
    assert flops.total_params(m) == total
    assert flops.active_params(m) == 3 * dense + 58 * moe_active + 2 * emb + 7168
    assert flops.active_params(m, input_embedding=False) == 3 * dense + 58 * moe_active + emb + 7168
    # MTP module (DeepSeek-V3 §2.2): M (2h x h), enorm, hnorm, one MoE block, head norm
    assert flops.mtp_params(m) == 2 * 7168 * 7168 + 3 * 7168 + moe_total
    # + the embedding and head copies the checkpoint stores: the card's "14B MTP module"
    assert abs(flops.mtp_params(m, with_shared=True) / 14e9 - 1) < 0.05
    # total + MTP with its copies = the checkpoint's 685B
    assert abs((total + flops.mtp_params(m, with_shared=True)) / 685e9 - 1) < 0.005


def test_gpt_oss_120b_hand_count():
    """GPT-OSS-120B (arXiv 2508.10925 Table 1: attention 0.96B, MLP 114.71B, embed+unembed
    1.16B, active 5.13B): per block q 2880*4096 + k, v 2880*512 + o 4096*2880 with biases
    (4096 + 2*512 + 2880) and 64 sinks; expert (2880*5760 + 5760) + (2880*2880 + 2880);
    router 2880*128 + 128; two norms."""
    attn = 2880 * 4096 + 2 * 2880 * 512 + 4096 * 2880 + (4096 + 1024 + 2880) + 64
    expert = 2880 * 5760 + 5760 + 2880 * 2880 + 2880
    router = 2880 * 128 + 128
    m = get_preset("gpt-oss-120b")
    assert abs(36 * attn / 0.96e9 - 1) < 0.01
    assert abs(36 * (128 * expert + router) / 114.71e9 - 1) < 0.001
    emb = 201088 * 2880
    assert abs(2 * emb / 1.16e9 - 1) < 0.002
    block_active = attn + 4 * expert + router + 2 * 2880
    assert flops.active_params(m, input_embedding=False) == 36 * block_active + emb + 2880
    # the 5.71B: the same with the input embedding table counted
    assert flops.active_params(m) == 36 * block_active + 2 * emb + 2880


def test_qwen3_qk_norm_counted():
    """Qwen3: q_norm and k_norm are RMSNorm(head_dim): 2*128 weights per block."""
    m = from_hf_config(load("qwen3_8b"))
    assert m.qk_norm
    no_norm = flops.block_params(replace(m, qk_norm=False), False)
    assert flops.block_params(m, False) - no_norm == 256
    # Qwen3-8B model card: 8.2B total (36 blocks, untied 151936 x 4096)
    assert abs(flops.total_params(m) / 8.2e9 - 1) < 0.01


def test_kimi_total_gap():
    """The released Kimi-K2 config gives 1.026T; the card prints "1T" (1 digit) and the
    report 1.04T. The gap is one MoE block's worth: 61 MoE blocks instead of 60 + 1 dense
    give 1.043T. Both facts are checked so that a change in either is seen."""
    m = get_preset("kimi-k2")
    total = flops.total_params(m)
    assert round(total / 1e12) == 1
    moe_minus_dense = flops.block_params(m, True) - flops.block_params(m, False)
    assert abs((total + moe_minus_dense) / 1.04e12 - 1) < 0.005


def test_llama4_scout_card_counts_the_vision_encoder():
    """The Scout card's 109B is the multimodal checkpoint. Its vision tower (vision_config:
    34 ViT blocks of 1408, MLP 5632, biased: 4*(1408^2 + 1408) + 2*1408*5632 + 5632 + 1408 +
    2 LayerNorms) and the 4096 -> 5120 projector close the gap to 1%."""
    cfg = load("llama4_scout")
    v = cfg["vision_config"]
    h, f, n = v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"]
    vit = n * (4 * (h * h + h) + 2 * h * f + f + h + 4 * h)
    projector = v["projector_output_dim"] * cfg["text_config"]["hidden_size"]
    text = flops.total_params(from_hf_config(cfg))
    assert abs(text / 109e9 - 1) > 0.01  # the text model alone is 107.8B
    assert abs((text + vit + projector) / 109e9 - 1) < 0.01


def test_mixtral_8x7b_card_counts_the_input_embedding():
    # 12.9B (Jiang et al. 2024): only with the embedding table counted (12.75B without)
    m = get_preset("mixtral-8x7b")
    assert abs(flops.active_params(m) / 12.9e9 - 1) < 0.002
    assert abs(flops.active_params(m, input_embedding=False) / 12.9e9 - 1) > 0.01


def test_dense_families_total():
    # Phi-4 (microsoft/phi-4 card: 14.7B); GLM-4.5 (zai-org/GLM-4.5 card: 355B total,
    # computed 352.8B without its MTP module of 4.0B). GLM's "32B active" follows a third
    # rule, neither embedding nor head counted (33.63B - 2*0.78B = 32.08B): checked here.
    phi4 = from_hf_config(load("phi4"))
    assert abs(flops.total_params(phi4) / 14.7e9 - 1) < 0.01
    glm = from_hf_config(load("glm4_5"))
    assert abs(flops.total_params(glm) / 355e9 - 1) < 0.01
    assert glm.num_nextn_predict_layers == 1 and flops.mtp_params(glm) > 0
    head_and_table = 2 * glm.vocab_size * glm.hidden_size
    assert abs((flops.active_params(glm) - head_and_table) / 32e9 - 1) < 0.01
