"""GPT-OSS's clamped gated activation (TransformerSpec.swiglu_limit): the extra saved
tensors, backward buffers and memory passes, counted by hand from the engines' code
(kernels.GluClamp cites it) and checked against the model's terms."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cost_model.engines import kernels
from cost_model.hardware.catalog import get_gpu
from cost_model.model.hf_import import from_hf_config
from cost_model.model.presets import get_preset
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig, TrainingSpec
from cost_model.specs.vocab import (
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_RUNTIME,
    ENGINE_TORCHTITAN,
    MLP_GELU,
)
from cost_model.terms import layers as L
from cost_model.terms.activations import block_activation_bytes, block_working_set_bytes
from cost_model.terms.compute import block_compute, glu_clamp_s
from cost_model.terms.geometry import geometry
from planner.request.parse import parse_transformer

HF = Path(__file__).parent / "data" / "hf"
GIB = 2**30
OSS = get_preset("gpt-oss-120b")
PLAIN = replace(OSS, swiglu_limit=None)
T = TrainingSpec(global_batch_size=512, seq_length=4096)
BF16 = 2
# one micro-batch of 4 x 4096 tokens, each routed to top_k = 4 experts of f = 2880
ROUTED_F_ELEMS = 4 * 4096 * 4 * 2880


def test_preset_and_hf_import_carry_the_limit():
    cfg = json.loads((HF / "gpt_oss_120b.json").read_text())
    assert cfg["swiglu_limit"] == 7.0
    assert from_hf_config(cfg).swiglu_limit == 7.0
    assert from_hf_config({**cfg, "swiglu_limit": 5.5}).swiglu_limit == 5.5
    # missing: the 7.0 transformers' GptOssExperts hard-codes
    assert from_hf_config({k: v for k, v in cfg.items() if k != "swiglu_limit"}).swiglu_limit == 7.0
    assert OSS.swiglu_limit == 7.0 and get_preset("gpt-oss-20b").swiglu_limit == 7.0
    # other families carry no clamp, even with the field present
    qwen = json.loads((HF / "qwen3_8b.json").read_text())
    assert from_hf_config({**qwen, "swiglu_limit": 7.0}).swiglu_limit is None


def test_request_schema_carries_and_checks_the_limit():
    base = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000, "mlp": "swiglu"}
    assert parse_transformer({**base, "swiglu_limit": 7.0}).swiglu_limit == 7.0
    assert parse_transformer(base).swiglu_limit is None
    with pytest.raises(SpecError):
        parse_transformer({**base, "mlp": "gelu", "swiglu_limit": 7.0})
    with pytest.raises(SpecError):
        parse_transformer({**base, "swiglu_limit": 0.0})


def test_megatron_saved_bytes_hand_count():
    """weighted_bias_quick_geglu_impl @92c8482e6d: the clamps save their inputs (views of the
    2f-wide fc1 output), the fused function the 2f-wide clamped concatenation: one extra 2f
    copy in bf16 per routed token: 4 x 4096 x 4 x 2 x 2880 x 2 bytes = 0.703125 GiB."""
    hand = 4 * 4096 * 4 * (2 * 2880) * BF16
    assert hand == ROUTED_F_ELEMS * kernels.MEGATRON_GLU_CLAMP.saved * BF16
    assert hand / GIB == 0.703125

    def act(m, tp=1, engine=ENGINE_MEGATRON):
        return block_activation_bytes(m, T, 4, tp, 1, False, True, engine)

    a, b = act(OSS), act(PLAIN)
    assert a.none - b.none == pytest.approx(hand)
    assert a.selective - b.selective == pytest.approx(hand)  # selective keeps the MLP's tensors
    assert a.full == b.full  # full recompute keeps only the block input
    assert act(OSS, tp=2).none - act(PLAIN, tp=2).none == pytest.approx(hand / 2)  # split by tp
    # eager model code (torchtitan's swiglu, HF GptOssExperts): 7f saved where the plain
    # gated path counts 3f; the runtime's model code has no clamp
    for engine in (ENGINE_TORCHTITAN, ENGINE_DEEPSPEED):
        assert act(OSS, engine=engine).none - act(PLAIN, engine=engine).none == pytest.approx(2 * hand)
    assert act(OSS, engine=ENGINE_RUNTIME).none == act(PLAIN, engine=ENGINE_RUNTIME).none


def test_megatron_backward_transient_hand_count():
    """At the split backward the two f-wide clamp gradients and their 2f concatenation are
    live (4f, the plain path 3f) and the two-sided clamp's two bool masks (f bytes each)."""
    cfg = ParallelConfig(dp=64, ep=8, micro_batch_size=4)
    hand = ROUTED_F_ELEMS * (1 * BF16 + 2 * 1)
    extra = block_working_set_bytes(OSS, T, cfg, True, 0.0) - block_working_set_bytes(PLAIN, T, cfg, True, 0.0)
    assert extra == pytest.approx(hand)


def test_megatron_memory_passes_hand_count():
    """Forward: clamp on each f-wide half (r 2, w 2 bytes each), cat (r 4, w 4): 16 bytes per
    f element. Backward (FunctionsManual.cpp clamp_backward): le (r 2, w 1) + where (r 1 + 2,
    w 2); ge, le (r 2, w 1 each), logical_and_ (r 2, w 1), where (r 1 + 2, w 2); SplitBackward's
    cat (r 4, w 4): 30 bytes. Kernels 3 forward, 2 zero fills + 2 + 4 + 1 backward. The block
    carries the sum exactly: a third in the forward, twice that in the backward."""
    fwd_b = 2 * (2 + 2) + (4 + 4)
    bwd_b = (2 + 1) + (1 + 2 + 2) + 2 * (2 + 1) + (2 + 1) + (1 + 2 + 2) + (4 + 4)
    assert (fwd_b, bwd_b) == (16, 30)
    c = kernels.MEGATRON_GLU_CLAMP
    assert (c.fwd_a * BF16 + c.fwd_bytes, c.bwd_a * BF16 + c.bwd_bytes) == (fwd_b, bwd_b)
    assert c.kernels == (3, 9)
    g = get_gpu("b200")
    cfg = ParallelConfig(dp=64, ep=8, micro_batch_size=4)
    geo = geometry(OSS, T, cfg, 0)
    f_elem = 4 * 2880 * L.moe.layout(OSS, T, cfg).imbalance  # the busiest rank's routed copies
    elems = 4 * 4096 * f_elem
    bw = g.hbm_gb_s * 1e9 * g.memory_bound_efficiency
    fwd, bwd = glu_clamp_s(OSS, g, cfg, geo, f_elem)
    assert fwd == pytest.approx(elems * fwd_b / bw + 3 * g.kernel_overhead_s)
    assert bwd == pytest.approx(elems * bwd_b / bw + 9 * g.kernel_overhead_s)
    with_c = block_compute(OSS, g, T, cfg, geo, None)
    without = block_compute(PLAIN, g, T, cfg, geometry(PLAIN, T, cfg, 0), None)
    assert (with_c.fwd_s + with_c.bwd_s) - (without.fwd_s + without.bwd_s) == pytest.approx(fwd + bwd)
    assert with_c.fwd_s - without.fwd_s == pytest.approx((fwd + bwd) / 3)
    assert glu_clamp_s(PLAIN, g, cfg, geo, f_elem) == (0.0, 0.0)


def test_gpt_oss_validation_row_memory_rises_by_the_hand_count():
    """MB25.11-GPTOSS120B-bf16-64xB200 at the configuration the planner chose before the clamp
    was priced (tp1 ep8 dp64 mb4, full recompute on 14 of 36 blocks): the 22 blocks that keep
    their activations each hold 0.703125 GiB more, and the block in flight adds it twice
    (its recomputed activations and the backward buffers). The peak (with the allocator's
    fragmentation on top) rises by at least that: about 18 GiB, past the B200's 178 GiB, so
    that plan would not have fit; the planner now recomputes more blocks."""
    from planner.service import estimate

    def est(model):
        return estimate({
            "model": model,
            "cluster": {"gpu": "b200", "num_gpus": 64, "gpus_per_node": 8},
            "training": {"global_batch_size": 512, "seq_length": 4096, "dtype": "bf16", "grad_dtype": "bf16"},
            "parallelism": {"dp": 64, "ep": 8, "zero": 1, "micro_batch_size": 4, "recompute": "full", "recompute_layers": [14],
                            "schedule": "1f1b", "engine": ENGINE_MEGATRON},
        }).prediction.memory

    per_block = 0.703125
    transformer = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(PLAIN).items()
                   if k not in ("moe", "mla")}
    transformer["moe"] = {k: v for k, v in vars(PLAIN.moe).items()}
    clamped, plain = est({"name": "gpt-oss-120b"}), est({"transformer": transformer})
    assert clamped.activations_gib - plain.activations_gib == pytest.approx(22 * per_block)
    assert clamped.peak_gib - plain.peak_gib >= (22 + 2) * per_block
    assert plain.peak_gib <= plain.capacity_gib < clamped.peak_gib


def test_spec_checks_refuse_a_clamp_without_a_gated_mlp():
    from cost_model.model.checks import check_architecture

    check_architecture(OSS)
    with pytest.raises(SpecError, match="swiglu_limit"):
        check_architecture(replace(OSS, mlp=MLP_GELU))
    with pytest.raises(SpecError, match="swiglu_limit"):
        check_architecture(replace(OSS, swiglu_limit=-1.0))
