"""FLOPs per token of MLA, sliding-window and chunked attention against hand counts and a
brute-force count of the mask."""

from __future__ import annotations

import pytest

from cost_model.model import attention, flops
from cost_model.model.presets import get_preset


def brute_pairs(s: int, keep) -> int:
    """(query i, key j) pairs with keep(i, j), counted one by one."""
    return sum(1 for i in range(s) for j in range(s) if keep(i, j))


@pytest.mark.parametrize("s,w", [(300, 64), (512, 512), (1000, 1)])
def test_sliding_window_pairs_against_brute_force(s, w):
    # HF's sliding mask keeps key j for query i iff 0 <= i - j < w
    exact = brute_pairs(s, lambda i, j: 0 <= i - j < w)
    assert exact == s * w - w * (w - 1) // 2  # closed form of the discrete count
    # the continuous convention s*w - w^2/2 (the brief's) differs from it by w/2
    got = attention.causal_score_entries(s, attention.SLIDING, w)
    assert got == pytest.approx(exact - w / 2, abs=1e-9) if s > w else got == s * s / 2


def test_full_and_chunked_pairs_against_brute_force():
    s, c = 257, 64
    full = brute_pairs(s, lambda i, j: j <= i)
    assert attention.causal_score_entries(s) == full - s / 2  # s^2/2 vs s(s+1)/2
    chunked = brute_pairs(s, lambda i, j: j <= i and i // c == j // c)
    # continuous form: c^2/2 per whole chunk + r^2/2 for the trailing one (r = 1 here)
    got = attention.causal_score_entries(s, attention.CHUNKED, c)
    assert got == 4 * c * c / 2 + 1 / 2
    assert abs(got - chunked) <= s / 2  # the discrete count adds one diagonal of s/2


def test_mla_projection_flops_hand_count():
    """DeepSeek-V3 (DeepSeek-V2 §2.1 shapes): per token 2 FLOPs per weight of
    q_a 7168x1536, q_b 1536x(128*192), kv_a 7168x(512+64), kv_b 512x(128*(128+128)); out
    (128*128)x7168."""
    m = get_preset("deepseek-v3")
    t = 1000
    qkv = 2 * t * (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256)
    assert flops.qkv_flops(m, t) == qkv
    assert flops.out_proj_flops(m, t) == 2 * t * 128 * 128 * 7168
    # 2 x the projection parameters (norms carry no FLOPs): 2 x (187,107,328 - 2048)
    assert flops.qkv_flops(m, t) + flops.out_proj_flops(m, t) == 2 * t * (187_107_328 - 2048)


def test_mla_core_flops_hand_count():
    """QK^T over 128+64 = 192 dims and PV over 128, 128 heads; s = 4096 tokens, one sequence:
    causal 2*128*192*s^2/2 + 2*128*128*s^2/2; non-causal twice that."""
    m = get_preset("deepseek-v3")
    s = 4096
    causal = 2 * 128 * 192 * s * s / 2 + 2 * 128 * 128 * s * s / 2
    assert flops.attention_core_flops_causal(m, s, s) == causal
    assert flops.attention_core_flops(m, s, s) == 2 * causal
    # per token at s = 4096: 2*128*320*2048 = 167.8 MFLOP, vs the 2*128*(2*128)*2048 an
    # MHA with 128-wide heads would cost
    assert flops.attention_core_flops_causal(m, 1, s) == pytest.approx(2 * 128 * 320 * s / 2)


def test_gpt_oss_sliding_and_full_blocks_hand_count():
    """GPT-OSS-120B at s = 8192: block 0 slides over 128 keys, block 1 is full.
    64 heads of 64: per pair 2*64*(64 + 64) FLOPs."""
    m = get_preset("gpt-oss-120b")
    s, w = 8192, 128
    per_pair = 2 * 64 * 128
    assert attention.layer_type(m, 0) == attention.SLIDING and attention.layer_type(m, 1) == attention.FULL
    assert flops.attention_core_flops_causal(m, s, s, index=0) == per_pair * (s * w - w * w / 2)
    assert flops.attention_core_flops_causal(m, s, s, index=1) == per_pair * s * s / 2
    # without the causal mask a window still bounds the keys at w
    assert flops.attention_core_flops(m, s, s, index=0) == per_pair * s * w
    assert flops.attention_core_flops(m, s, s, index=1) == per_pair * s * s
    # the step: 18 sliding + 18 full blocks, forward + backward
    blocks = sum(flops.block_flops(m, s, s, True, index=i, causal=True).attn_core for i in range(36))
    assert blocks == 18 * per_pair * (s * w - w * w / 2) + 18 * per_pair * s * s / 2


def test_llama4_chunked_and_gemma3_pattern():
    scout = get_preset("llama4-scout")
    kinds = [attention.layer_type(scout, i) for i in range(48)]
    assert kinds.count(attention.FULL) == 12 and kinds[3] == attention.FULL and kinds[0] == attention.CHUNKED
    s, c = 32768, 8192
    per_pair = 2 * 40 * 256
    assert flops.attention_core_flops_causal(scout, s, s, index=0) == per_pair * 4 * c * c / 2
    gemma = get_preset("gemma3-27b")
    kinds = [attention.layer_type(gemma, i) for i in range(62)]
    assert [i for i, k in enumerate(kinds) if k == attention.FULL] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]


@pytest.mark.parametrize("l,h,a,B,s", [(96, 12288, 96, 1536, 2048), (48, 6144, 64, 8, 4096)])
def test_causal_model_flops_halve_the_attention_term(l, h, a, B, s):  # noqa: E741
    """Korthikanti eq. 8 with the attention term s/(6h) halved: the causal MFU numerator."""
    from tests.cost_model.test_params_flops import V_GPT, _gpt

    got = flops.model_flops_per_step(_gpt(l, h, a), B, s, causal=True)
    ref = 72 * B * s * l * h**2 * (1 + s / (12 * h) + V_GPT / (12 * l * h))
    assert got == pytest.approx(ref, rel=1e-3)


def test_mtp_flops_hand_count():
    """DeepSeek-V3's MTP module per token: 2*(2h*h) projection + one MoE block + its own
    logits 2*h*V."""
    m = get_preset("deepseek-v3")
    s = 4096
    block = flops.block_flops(m, 1, s, True, causal=True).total
    assert flops.mtp_flops(m, 1, s) == 2 * 2 * 7168 * 7168 + block + 2 * 7168 * 129280
    with_mtp = flops.model_flops_per_step(m, 1, s, causal=True, mtp=True)
    assert with_mtp - flops.model_flops_per_step(m, 1, s, causal=True) == pytest.approx(3 * s * flops.mtp_flops(m, 1, s))


def test_shared_expert_width_and_router_in_block_flops():
    m = get_preset("llama4-maverick")
    t = 10
    bf = flops.block_flops(m, t, 128, True)
    # top-1 routed + 1 shared expert of 8192, SwiGLU: 2 * 3*2t*h*f; router 2*t*h*128
    assert bf.mlp == 2 * 3 * 2 * t * 5120 * 8192
    assert bf.router == 2 * t * 5120 * 128
    assert flops.block_flops(m, t, 128, False).mlp == 3 * 2 * t * 5120 * 16384


def test_tp_shards_of_mla_projections():
    # down projections replicated, up projections column-split, output row-split
    m = get_preset("deepseek-v3")
    dims = dict((n, (o, i)) for n, o, i in attention.sharded_projections(m, 8))
    assert dims["q_down"] == (1536, 7168) and dims["kv_down"] == (576, 7168)
    assert dims["q_up"] == (128 * 192 / 8, 1536) and dims["kv_up"] == (128 * 256 / 8, 512)
    assert dims["out"] == (7168, 128 * 128 / 8)
    assert attention.tp_replicated_params(m) == 7168 * 1536 + 7168 * 576 + 1536 + 512
    assert attention.kv_elems_per_token(m) == 128 * (192 + 128)
    llama = get_preset("llama3-8b")
    assert attention.kv_elems_per_token(llama) == 2 * 8 * 128 and attention.tp_replicated_params(llama) == 0
