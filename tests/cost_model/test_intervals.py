"""Prediction intervals (cost_model/hardware/intervals.py): every estimate carries a p10-p90
step time around its point and an upper bound on its peak, from the residual table's bucket
(or its stated fallbacks); `fits` is decided by the upper bound."""

from __future__ import annotations

import dataclasses

import pytest

from cost_model.estimate import estimate
from cost_model.hardware import intervals
from cost_model.hardware.catalog import get_gpu
from cost_model.model.presets import get_preset
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec

TABLE = {
    "default": {"min_time_rows": 4, "min_memory_rows": 2, "time_ratio_p10": 0.7, "time_ratio_p90": 1.4,
                "memory_ratio_max": 1.2},
    "buckets": {
        # enough rows at the exact bucket for time, too few for memory: memory from the pooled one
        "megatron.hopper.dense.single": {"time_rows": 5, "memory_rows": 1, "time_ratio_p10": 0.9,
                                         "time_ratio_p90": 1.1, "memory_ratio_max": 1.5},
        "megatron.hopper.dense.any": {"time_rows": 9, "memory_rows": 3, "time_ratio_p10": 0.85,
                                      "time_ratio_p90": 1.15, "memory_ratio_max": 1.08},
        # a bucket measured entirely above 1 (slower than predicted): the point still lies in the band
        "torchtitan.hopper.dense.single": {"time_rows": 4, "memory_rows": 2, "time_ratio_p10": 1.05,
                                           "time_ratio_p90": 1.2, "memory_ratio_max": 0.97},
    },
}


@pytest.fixture
def table(monkeypatch):
    intervals.band.cache_clear()
    monkeypatch.setattr(intervals, "table", lambda: TABLE)
    yield TABLE
    intervals.band.cache_clear()


def _cluster(gpu, n=8) -> ClusterSpec:
    return ClusterSpec(gpu, n, 8, gpu.nvlink_gb_s, gpu.network_gb_s, gpu.intra_node_latency_s, gpu.inter_node_latency_s)


def _est(gpu=None, engine="megatron", n=8, **cfg):
    gpu = gpu or get_gpu("h100-sxm")
    return estimate(get_preset("llama3-8b"), _cluster(gpu, n), TrainingSpec(32, 4096),
                    ParallelConfig(dp=n, engine=engine, micro_batch_size=1, **cfg))


def test_lookup_takes_the_most_specific_bucket_with_enough_rows(table):
    b = intervals.band("megatron", "h100-sxm", False, False)
    assert (b.time_low, b.time_high, b.time_from) == (0.9, 1.1, "megatron.hopper.dense.single")
    assert (b.memory_upper, b.memory_from) == (1.08, "megatron.hopper.dense.any")
    # a GPU object named after its catalog base takes the base's family
    assert intervals.family_of("h100-sxm-96gb-500w") == "hopper"
    # no bucket of this engine and family: the stated default
    d = intervals.band("deepspeed", "mi300x", True, True)
    assert (d.time_low, d.time_high, d.memory_upper, d.time_from) == (0.7, 1.4, 1.2, "default")
    # ratios entirely above (or below) 1 still bracket the point
    t = intervals.band("torchtitan", "h200", False, False)
    assert t.time_low == 1.0 and t.time_high == 1.2 and t.memory_upper == 1.0


@pytest.mark.parametrize("engine,zero", [("megatron", 1), ("torchtitan", 3), ("deepspeed", 2)])
def test_every_estimate_carries_an_ordered_interval(table, engine, zero):
    p = _est(engine=engine, zero=zero, recompute="full").prediction
    assert p.step_time_s_p10 <= p.step_time_s <= p.step_time_s_p90
    assert p.memory.peak_upper_gib >= p.memory.peak_gib
    assert p.interval_source and engine in p.interval_source


def test_fits_flips_when_the_upper_bound_exceeds_capacity_but_the_point_does_not(table):
    base = get_gpu("h100-sxm")
    m = _est(base, zero=1, recompute="full").prediction.memory
    assert m.peak_upper_gib == pytest.approx(m.peak_gib * 1.08)
    # a part of the same family with capacity between the point and the bound (names its base)
    between = dataclasses.replace(base, name="h100-sxm-between", memory_gib=(m.peak_gib + m.peak_upper_gib) / 2)
    est = _est(between, zero=1, recompute="full")
    assert est.prediction.memory.peak_gib == pytest.approx(m.peak_gib)  # capacity does not move the peak
    assert est.prediction.memory.peak_gib < est.prediction.memory.capacity_gib
    assert not est.fits
    roomy = dataclasses.replace(base, name="h100-sxm-roomy", memory_gib=m.peak_upper_gib * 1.001)
    assert _est(roomy, zero=1, recompute="full").fits
