"""Activation memory, model-state bytes and in-flight micro-batches.

References written out here:
- Korthikanti et al. 2022 Table 2 (activation bytes per transformer layer, 16-bit, dropout):
    no parallelism          sbh(34 + 5as/h)
    TP                      sbh(10 + 24/t + 5as/(ht))
    TP + SP                 sbh(34/t + 5as/(ht))
    TP + selective          sbh(10 + 24/t)
    TP + SP + selective     sbh * 34/t
    full recompute          2sbh   (no SP; with SP the checkpointed input is sharded: 2sbh/t)
- ZeRO (Rajbhandari et al. 2020 §3, K = 12): 16, 4 + 12/d, 2 + 14/d, 16/d bytes/param
- Megatron-LM docs/source/distrib_optimizer.md: bf16 param + fp32 grads 18 and 6 + 12/d;
  fp32 param + fp32 grads 16 and 8 + 8/d
- Korthikanti §4.2.3: 1F1B rank r holds min(m, p - r) micro-batches; interleaved rank 0
  holds p(1 + (p-1)/(p v)); GPipe holds all m.
"""

from __future__ import annotations

import pytest

from cost_model.engines.states import zero_state_bytes
from cost_model.pipeline import in_flight
from cost_model.specs.inputs import TrainingSpec, TransformerSpec
from cost_model.terms.activations import block_activation_bytes, korthikanti_table2_bytes

# ---------------------------------------------------------------- Korthikanti Table 2 / 3

# Korthikanti Table 3 rows (a, h, t) with s = 2048, b = 1 (22B, 175B, 530B, 1T)
TABLE3_ROWS = [
    pytest.param(64, 6144, 8, id="22B"),
    pytest.param(96, 12288, 8, id="175B"),
    pytest.param(128, 20480, 8, id="530B"),
    pytest.param(160, 25600, 8, id="1T"),
]
S = 2048


def gpt(h: int, a: int, dropout: bool = True, layers: int = 2) -> TransformerSpec:
    return TransformerSpec(
        name="gpt-test", num_layers=layers, hidden_size=h, num_attention_heads=a, num_kv_heads=a,
        ffn_hidden_size=4 * h, vocab_size=51200, mlp="gelu", norm="layernorm", position="learned",
        tie_embeddings=True, dropout=dropout,
    )


def eager(dtype: str = "bf16", s: int = S) -> TrainingSpec:
    return TrainingSpec(global_batch_size=8, seq_length=s, dtype=dtype, attention="eager")


def act(h, a, t, sp, b=1, dtype="bf16", dropout=True, attention="eager", s=S):
    tr = TrainingSpec(global_batch_size=8, seq_length=s, dtype=dtype, attention=attention)
    return block_activation_bytes(gpt(h, a, dropout), tr, b, t, 1, sp, False)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("a,h,_t", TABLE3_ROWS)
@pytest.mark.parametrize("b", [1, 4])
def test_table2_no_parallelism(a, h, _t, b, dtype):
    s = S
    sbh = s * b * h
    r = act(h, a, 1, False, b=b, dtype=dtype)
    assert r.none == pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-12)
    assert r.selective == pytest.approx(sbh * 34, rel=1e-12)
    assert r.full == pytest.approx(2 * sbh, rel=1e-12)


@pytest.mark.parametrize("a,h,t", TABLE3_ROWS)
def test_table2_tensor_parallel(a, h, t):
    s, b = S, 1
    sbh = s * b * h
    r = act(h, a, t, False)
    assert r.none == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert r.selective == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)


@pytest.mark.parametrize("a,h,t", TABLE3_ROWS)
def test_table2_tensor_and_sequence_parallel(a, h, t):
    s, b = S, 1
    sbh = s * b * h
    r = act(h, a, t, True)
    assert r.none == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert r.selective == pytest.approx(sbh * 34 / t, rel=1e-12)


@pytest.mark.parametrize("a,h,t", TABLE3_ROWS)
def test_table2_full_recompute_keeps_block_input(a, h, t):
    s, b = S, 1
    sbh = s * b * h
    assert act(h, a, t, False).full == pytest.approx(2 * sbh, rel=1e-12)  # Table 2: 2sbh without SP
    assert act(h, a, t, True).full == pytest.approx(2 * sbh / t, rel=1e-12)  # sharded input with SP


def test_gpt3_175b_table2_numbers_by_hand():
    # GPT-3 175B, s=2048, b=1, h=12288, a=96: sbh = 25,165,824
    # no parallelism: sbh * (34 + 5*96*2048/12288) = sbh * 114 = 2,868,903,936 bytes
    r = act(12288, 96, 1, False)
    assert r.none == 2_868_903_936
    assert r.selective == 25_165_824 * 34


def test_gpt3_175b_tp8_numbers_by_hand():
    # t = 8: TP sbh*(10 + 3 + 10) = 23 sbh = 578,813,952; TP+SP 114/8 sbh = 358,612,992
    # TP+selective 13 sbh = 327,155,712; TP+SP+selective 34/8 sbh = 106,954,752
    r, r_sp = act(12288, 96, 8, False), act(12288, 96, 8, True)
    assert (r.none, r.selective) == (578_813_952, 327_155_712)
    assert (r_sp.none, r_sp.selective) == (358_612_992, 106_954_752)


@pytest.mark.parametrize("a,h,t", TABLE3_ROWS)
def test_korthikanti_table2_helper_matches_written_formulas(a, h, t):
    s, b = S, 1
    sbh = s * b * h
    K = korthikanti_table2_bytes
    assert K(s, b, h, a, 1, "none") == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert K(s, b, h, a, t, "tp") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert K(s, b, h, a, t, "tp_sp") == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert K(s, b, h, a, t, "tp_selective") == pytest.approx(sbh * (10 + 24 / t))
    assert K(s, b, h, a, t, "tp_sp_selective") == pytest.approx(sbh * 34 / t)
    assert K(s, b, h, a, t, "full") == pytest.approx(2 * sbh)


@pytest.mark.parametrize("a,h,_t", TABLE3_ROWS)
def test_flash_attention_drops_the_s2_term(a, h, _t):
    # FlashAttention stores no s x s scores: what remains is the selective figure 34sbh
    # plus one fp32 logsumexp per head and token (4 bytes * s*b*a)
    s, b = S, 1
    r = act(h, a, 1, False, attention="flash")
    assert r.none == pytest.approx(34 * s * b * h + 4 * s * b * a, rel=1e-12)
    e = act(h, a, 1, False, attention="eager")
    assert e.none - r.none == pytest.approx(5 * a * s * s * b - 4 * s * b * a, rel=1e-12)


@pytest.mark.parametrize("a,h,_t", TABLE3_ROWS)
def test_no_dropout_removes_mask_bytes(a, h, _t):
    # Without dropout: the 1-byte masks go (attention-out and MLP-out residual masks: 2sbh;
    # attention-probability mask as^2b) and so does the dropout output (2as^2b); the softmax
    # output 2as^2b stays: sbh(34 - 2) + 2as^2b
    s, b = S, 1
    sbh = s * b * h
    r = act(h, a, 1, False, dropout=False)
    assert r.none == pytest.approx(32 * sbh + 2 * a * s * s * b, rel=1e-12)
    assert r.selective == pytest.approx(32 * sbh, rel=1e-12)
    f = act(h, a, 1, False, dropout=False, attention="flash")
    assert f.none == pytest.approx(32 * sbh + 4 * s * b * a, rel=1e-12)


# ---------------------------------------------------------------- model states per parameter


def _tr(dtype="bf16", grad="bf16", opt="adam") -> TrainingSpec:
    return TrainingSpec(global_batch_size=8, seq_length=2048, dtype=dtype, optimizer=opt, grad_dtype=grad)


@pytest.mark.parametrize("d", [1, 2, 8, 64, 1000])
def test_zero_paper_bytes_per_param_16bit_grads(d):
    t = _tr("bf16", "bf16")
    f = zero_state_bytes
    assert f(t, 0, d).total == pytest.approx(16)
    assert f(t, 1, d).total == pytest.approx(4 + 12 / d)
    assert f(t, 2, d).total == pytest.approx(2 + 14 / d)
    assert f(t, 3, d).total == pytest.approx(16 / d)
    # the split: 2 bytes weights, 2 bytes grads, K = 12 optimizer
    z0 = f(t, 0, d)
    assert (z0.weights, z0.grads, z0.optimizer) == (2, 2, 12)


def test_zero_paper_fp16_same_as_bf16():
    t = _tr("fp16", "fp16")
    assert zero_state_bytes(t, 0, 8).total == 16
    assert zero_state_bytes(t, 3, 8).total == pytest.approx(2)


@pytest.mark.parametrize("d", [1, 4, 24, 512])
def test_megatron_distributed_optimizer_table(d):
    f = zero_state_bytes
    t = _tr("bf16", "fp32")  # bf16 param, fp32 grads
    assert f(t, 0, d).total == pytest.approx(18)
    assert f(t, 1, d).total == pytest.approx(6 + 12 / d)
    t32 = _tr("fp32", "fp32")  # fp32 param, fp32 grads: no separate master copy
    assert f(t32, 0, d).total == pytest.approx(16)
    assert f(t32, 1, d).total == pytest.approx(8 + 8 / d)


def test_sgd_momentum_bytes_per_param():
    # SGD with momentum: fp32 master 4 + momentum 4 = 8 optimizer bytes (fp32 training: 4)
    f = zero_state_bytes
    assert f(_tr("bf16", "bf16", "sgd"), 0, 1).total == 2 + 2 + 8
    assert f(_tr("bf16", "fp32", "sgd"), 0, 1).total == 2 + 4 + 8
    assert f(_tr("fp32", "fp32", "sgd"), 0, 1).total == 4 + 4 + 4
    assert f(_tr("bf16", "bf16", "sgd"), 3, 4).total == pytest.approx(12 / 4)


# ---------------------------------------------------------------- in-flight micro-batches


@pytest.mark.parametrize("p,m", [(4, 8), (8, 64), (8, 3), (16, 16)])
def test_1f1b_in_flight(p, m):
    for r in range(p):
        assert in_flight.in_flight_micro_batches("1f1b", p, r, m, 1) == min(m, p - r)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 3)])
def test_gpipe_in_flight(p, m):
    for r in range(p):
        assert in_flight.in_flight_micro_batches("gpipe", p, r, m, 1) == m


@pytest.mark.parametrize("p,v", [(4, 2), (8, 2), (8, 4), (12, 3)])
def test_interleaved_rank0_in_flight_korthikanti(p, v):
    m = 64 * p  # enough micro-batches that the warm-up is not capped
    got = in_flight.in_flight_micro_batches("interleaved", p, 0, m, v)
    assert got == pytest.approx(p * (1 + (p - 1) / (p * v)), rel=1e-12)
    # the interleaved schedule holds more than 1F1B's p, less than 2p
    assert p < got < 2 * p


def _megatron_interleaved_peak(pp, vpp, m, rank, layers):
    """Brute force over Megatron's interleaved order (schedules.py get_pp_rank_microbatches,
    get_model_chunk_id: groups of pp micro-batches per chunk): after every forward, the
    saved micro-batches weighted by their chunk's size."""
    total, group = m * vpp, pp * vpp
    warm = min(total, 2 * (pp - rank - 1) + (vpp - 1) * pp)
    live, peak, order = [0] * vpp, 0.0, []
    for k in range(total):
        order.append(("F", (k % group) // pp))
        if k >= warm:
            order.append(("B", vpp - 1 - ((k - warm) % group) // pp))
    for kind, c in order:
        live[c] += 1 if kind == "F" else -1
        peak = max(peak, sum(n * x for n, x in zip(live, layers, strict=True)))
    return peak


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (8, 8, 32), (8, 4, 16), (4, 3, 12)])
def test_interleaved_peak_per_chunk_equals_megatron_order(p, v, m):
    """Uniform virtual stages: the per-chunk peak is in_flight x the rank's total (exact);
    uneven ones (embedding / loss accounting: the first chunk of rank 0 and the last of the
    last rank one block short, or a heavier first chunk): the brute-force peak over Megatron's
    order, which the uniform count misses where the fuller chunks are the heavier ones."""
    for r in range(p):
        uniform = (2.0,) * v
        got = in_flight.peak_in_flight_bytes("interleaved", p, r, m, v, uniform)
        assert got == pytest.approx(in_flight.in_flight_micro_batches("interleaved", p, r, m, v) * sum(uniform))
        assert got == pytest.approx(_megatron_interleaved_peak(p, v, m, r, uniform))
        for uneven in ((1.0,) + (2.0,) * (v - 1), (2.0,) * (v - 1) + (1.0,), (3.0,) + (2.0,) * (v - 1)):
            assert in_flight.peak_in_flight_bytes("interleaved", p, r, m, v, uneven) == pytest.approx(
                _megatron_interleaved_peak(p, v, m, r, uneven))
    # Llama 3.1 405B at pp 8 x vpp 8, 32 micro-batches, the last rank's last chunk one block
    # short (loss accounting): 114 block-micro-batches, the uniform count says 57/8 x 15
    last = (2.0,) * 7 + (1.0,)
    if (p, v, m) == (8, 8, 32):
        assert in_flight.peak_in_flight_bytes("interleaved", 8, 7, 32, 8, last) == 114
        assert in_flight.in_flight_micro_batches("interleaved", 8, 7, 32, 8) * sum(last) == pytest.approx(57 / 8 * 15)
