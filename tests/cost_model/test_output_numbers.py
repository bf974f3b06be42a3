"""Numbers people read off a prediction: parameter counts that add up, MFU against the bf16
peak (the fp8 one beside it), and no negative zeros from float rounding."""

from __future__ import annotations

import json
import math

import pytest

from cost_model.hardware.catalog import get_gpu
from cost_model.model.flops import active_params, total_params
from cost_model.model.presets import PRESETS
from cost_model.pipeline.stages import clamp_rounding
from cost_model.specs.inputs import TransformerSpec
from planner.service import _model_summary, estimate

DENSE = [n for n, m in PRESETS.items() if isinstance(m, TransformerSpec) and m.moe is None]
MOE = [n for n, m in PRESETS.items() if isinstance(m, TransformerSpec) and m.moe is not None]


@pytest.mark.parametrize("name", DENSE)
def test_dense_active_equals_total(name):
    # a dense model: every parameter is touched by every token, embeddings and head once each
    m = PRESETS[name]
    assert active_params(m) == total_params(m)
    summary = _model_summary(m)  # what a plan's `model` block states
    assert summary.active_params == summary.total_params


@pytest.mark.parametrize("name", MOE)
def test_moe_active_below_total(name):
    m = PRESETS[name]
    assert active_params(m) < total_params(m)


def _estimate(dtype: str, gpu: str = "h100-sxm") -> dict:
    return estimate({
        "model": "llama3-8b", "cluster": {"gpu": gpu, "num_gpus": 8},
        "training": {"global_batch_size": 64, "seq_length": 4096, "dtype": dtype},
        "parallelism": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero": 1},
    }).prediction


def test_mfu_against_bf16_peak_under_fp8():
    # fp8 training: `mfu` divides by the dense bf16 peak, `mfu_fp8_peak` by the fp8 one
    p = _estimate("fp8")
    g = get_gpu("h100-sxm")
    ratio = g.peak_tflops["fp8"] / g.peak_tflops["bf16"]  # 1978.9 / 989.4 (datasheet dense)
    assert p.mfu_fp8_peak is not None
    assert p.mfu == pytest.approx(p.mfu_fp8_peak * ratio, rel=1e-12)
    # the same definition as a bf16 run's: its MFU is below the fp8 run's (same model FLOPs, faster step)
    b = _estimate("bf16")
    assert b.mfu_fp8_peak is None
    assert p.mfu / b.mfu == pytest.approx(b.step_time_s / p.step_time_s, rel=1e-12)


def test_mfu_reference_is_bf16_for_every_gpu_dtype():
    p = _estimate("bf16", "a100-80gb")
    est_peak = p.tflops_per_gpu * 1e12 / p.hfu  # tflops_per_gpu = HFU x the peak MFU uses
    assert est_peak == pytest.approx(get_gpu("a100-80gb").peak_tflops["bf16"] * 1e12, rel=1e-9)


def _has_negative_zero(doc) -> bool:
    if isinstance(doc, dict):
        return any(_has_negative_zero(v) for v in doc.values())
    if isinstance(doc, list):
        return any(_has_negative_zero(v) for v in doc)
    return isinstance(doc, float) and (doc < 0 and doc > -1e-9 or (doc == 0 and math.copysign(1, doc) < 0))


def test_no_negative_zero_bubble_pp1():
    # pp=1 with full recompute: the bubble was the difference of one sum taken in two orders,
    # -7.1e-15 s before it was clamped
    pred = estimate({
        "model": "llama3-8b", "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
        "training": {"global_batch_size": 512, "seq_length": 4096},
        "parallelism": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "recompute": "full"},
    }).prediction
    b = pred.breakdown.bubble_s
    assert b == 0.0 and math.copysign(1, b) > 0
    text = pred.model_dump_json()
    assert "-0.0" not in text
    assert not _has_negative_zero(json.loads(text))


def test_clamp_rounding_keeps_real_negatives():
    assert clamp_rounding(-7e-15, 3.2) == 0.0
    assert math.copysign(1, clamp_rounding(-0.0, 1.0)) > 0
    assert clamp_rounding(-0.5, 3.2) == -0.5  # a modelling error stays visible
    assert clamp_rounding(0.25, 3.2) == 0.25
