"""Parameter counts and FLOPs against the papers' closed forms.

Every reference number below is written out from the paper, not taken from the code:
- Narayanan et al. SC'21 eq. 2:  P = 12*l*h^2 * (1 + 13/(12h) + (V + s)/(12*l*h))
- Narayanan et al. SC'21 Table 1: the published model sizes (billions)
- Korthikanti et al. 2022 eq. 8: model FLOPs = 72*B*s*l*h^2 * (1 + s/(6h) + V/(12*l*h))
- Narayanan et al. SC'21 eq. 3:  96*B*s*l*h^2 * (1 + s/(6h) + V/(16*l*h)) (with recompute)
"""

from __future__ import annotations

import pytest

from cost_model.model import flops
from cost_model.model.presets import get_preset
from cost_model.specs.inputs import MoESpec, TransformerSpec

V_GPT = 51200
S_GPT = 2048

# name, layers, hidden, heads, published size in billions (Narayanan SC'21 Table 1)
NARAYANAN_TABLE1 = [
    ("gpt-1.7b", 24, 2304, 24, 1.7),
    ("gpt-3.6b", 30, 3072, 32, 3.6),
    ("gpt-7.5b", 36, 4096, 32, 7.5),
    ("gpt-18b", 40, 6144, 48, 18.4),
    ("gpt-39b", 48, 8192, 64, 39.1),
    ("gpt-76b", 60, 10240, 80, 76.1),
    ("gpt-145b", 80, 12288, 96, 145.6),
    ("gpt-310b", 96, 16384, 128, 310.1),
    ("gpt-530b", 105, 20480, 128, 529.6),
    ("gpt-1t", 128, 25600, 160, 1008.0),
]


def eq2_params(l: int, h: int, V: int = V_GPT, s: int = S_GPT) -> float:  # noqa: E741
    """Narayanan et al. SC'21 eq. 2, written out independently of cost_model."""
    return 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))


@pytest.mark.parametrize("name,l,h,a,published_b", NARAYANAN_TABLE1)
def test_table1_preset_shapes(name, l, h, a, published_b):  # noqa: E741
    m = get_preset(name)
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (l, h, a)
    assert (m.vocab_size, m.max_position_embeddings, m.ffn_hidden_size) == (V_GPT, S_GPT, 4 * h)


@pytest.mark.parametrize("name,l,h,a,published_b", NARAYANAN_TABLE1)
def test_table1_params_match_eq2(name, l, h, a, published_b):  # noqa: E741
    p = flops.total_params(get_preset(name))
    ref = eq2_params(l, h)
    assert abs(p - ref) / ref < 0.01
    # eq. 2 omits only the final LayerNorm (2h): the count is exact up to that
    assert p == pytest.approx(ref + 2 * h, rel=1e-12)


@pytest.mark.parametrize("name,l,h,a,published_b", NARAYANAN_TABLE1)
def test_table1_params_match_published_sizes(name, l, h, a, published_b):  # noqa: E741
    p_b = flops.total_params(get_preset(name)) / 1e9
    # Table 1 prints sizes rounded to 0.1B (1008 for the 1T row): the count must round to
    # the published figure. 1% relative holds from 7.5B up; the 1.7B and 3.6B rows are
    # 1.65B and 3.56B by eq. 2 itself (rounding moves them 2.8% and 1.05%).
    digits = 0 if published_b >= 1000 else 1
    assert round(p_b, digits) == pytest.approx(published_b)
    tol = 0.01 if published_b >= 7.5 else 0.03
    assert abs(p_b - published_b) / published_b < tol
    # eq. 2 itself against the published numbers, same tolerance (checks the reference)
    assert abs(eq2_params(l, h) / 1e9 - published_b) / published_b < tol


def test_narayanan_eq2_helper_matches_written_formula():
    for _, l, h, _, _ in NARAYANAN_TABLE1:  # noqa: E741
        assert flops.narayanan_eq2_params(l, h, V_GPT, S_GPT) == pytest.approx(eq2_params(l, h), rel=1e-12)


# Llama 2 (Touvron et al. 2023), Llama 3 (Dubey et al. 2024), Mixtral (Jiang et al. 2024):
# the sizes published on the model cards / HF safetensors index (billions).
PUBLISHED_SIZES_B = [
    ("llama2-7b", 6.74),
    ("llama2-13b", 13.0),
    ("llama2-70b", 69.0),
    ("llama3-8b", 8.03),
    ("llama3-70b", 70.6),
    ("llama3-405b", 405.9),
    ("mixtral-8x7b", 46.7),
    ("mixtral-8x22b", 141.0),
]


@pytest.mark.parametrize("name,published_b", PUBLISHED_SIZES_B)
def test_llama_mixtral_params_within_2pct(name, published_b):
    p_b = flops.total_params(get_preset(name)) / 1e9
    assert abs(p_b - published_b) / published_b < 0.02


def test_llama3_8b_exact_count():
    # Meta-Llama-3-8B model.safetensors.index.json total_size / 2 bytes = 8,030,261,248
    assert flops.total_params(get_preset("llama3-8b")) == 8_030_261_248


@pytest.mark.parametrize("name,active_b", [("mixtral-8x7b", 12.9), ("mixtral-8x22b", 39.1)])
def test_mixtral_active_params(name, active_b):
    # Mixtral paper / model card: 12.9B and 39B (39.1B) active parameters per token
    assert abs(flops.active_params(get_preset(name)) / 1e9 - active_b) / active_b < 0.02


# --------------------------------------------------------------------------- FLOPs


def korthikanti_eq8(B: int, s: int, l: int, h: int, V: int) -> float:  # noqa: E741
    """Korthikanti et al. 2022 eq. 8 (model FLOPs per step, attention counted full)."""
    return 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))


def narayanan_eq3(B: int, s: int, l: int, h: int, V: int) -> float:  # noqa: E741
    return 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))


def _gpt(l: int, h: int, a: int, V: int = V_GPT) -> TransformerSpec:  # noqa: E741
    return TransformerSpec(
        name="gpt-test", num_layers=l, hidden_size=h, num_attention_heads=a, num_kv_heads=a,
        ffn_hidden_size=4 * h, vocab_size=V, mlp="gelu", norm="layernorm", position="learned",
        tie_embeddings=True, dropout=True,
    )


@pytest.mark.parametrize(
    "l,h,a,B,s",
    [(96, 12288, 96, 1536, 2048), (24, 2304, 24, 512, 2048), (128, 25600, 160, 3072, 2048), (48, 6144, 64, 8, 4096)],
)
def test_model_flops_equal_korthikanti_eq8(l, h, a, B, s):  # noqa: E741
    got = flops.model_flops_per_step(_gpt(l, h, a), B, s)
    ref = korthikanti_eq8(B, s, l, h, V_GPT)
    assert abs(got - ref) / ref < 1e-3


def test_gpt3_175b_step_flops_hand_number():
    # 72 * 1536 * 2048 * 96 * 12288^2 = 3.28312e18;
    # x (1 + 2048/(6*12288) + 51200/(12*96*12288)) = x (1 + 0.0277778 + 0.0036169) = 3.38619e18
    got = flops.model_flops_per_step(get_preset("gpt3-175b"), 1536, 2048)
    assert got == pytest.approx(3.38619e18, rel=1e-4)


@pytest.mark.parametrize("l,h,B,s", [(96, 12288, 1536, 2048), (36, 4096, 512, 2048)])
def test_narayanan_eq3_is_four_thirds_of_block_flops(l, h, B, s):  # noqa: E741
    got = flops.narayanan_eq3_flops(B, s, l, h, V_GPT)
    assert got == pytest.approx(narayanan_eq3(B, s, l, h, V_GPT), rel=1e-12)
    # eq. 3 = 4/3 x the block part of eq. 8 (one extra forward for recompute) + the same
    # logits term 6*B*s*h*V (the output layer is not recomputed)
    blocks_eq8 = 72 * B * s * l * h**2 * (1 + s / (6 * h))
    logits = 6 * B * s * h * V_GPT
    assert got == pytest.approx(4 / 3 * blocks_eq8 + logits, rel=1e-12)
    model = flops.model_flops_per_step(_gpt(l, h, h // 128), B, s)
    assert model == pytest.approx(blocks_eq8 + logits, rel=1e-12)


def test_gqa_swiglu_block_flops_by_hand():
    # Llama-3-8B block, t tokens: QKV 2t*h*(h + 2*8*128), out 2t*h^2, SwiGLU 3*2t*h*f,
    # core 4*t*s*h (a*d = h)
    m = get_preset("llama3-8b")
    t, s, h, f = 4096, 4096, 4096, 14336
    bf = flops.block_flops(m, t, s, False)
    assert bf.qkv == 2 * t * h * (h + 2 * 1024)
    assert bf.out_proj == 2 * t * h * h
    assert bf.mlp == 6 * t * h * f
    assert bf.attn_core == 4 * t * s * h


def test_moe_block_flops_by_hand():
    # MoE block: top_k routed + shared experts through the MLP, router 2*t*h*E
    moe = MoESpec(num_experts=8, top_k=2, ffn_hidden_size=1024, num_shared_experts=1)
    m = TransformerSpec("moe", 4, 512, 8, 8, 2048, 1000, mlp="swiglu", norm="rmsnorm", position="rope", moe=moe)
    bf = flops.block_flops(m, 100, 100, True)
    assert bf.mlp == 3 * 6 * 100 * 512 * 1024
    assert bf.router == 2 * 100 * 512 * 8
