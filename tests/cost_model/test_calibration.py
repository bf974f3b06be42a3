"""A profile calibrates the device (cost_model.hardware.calibration), not only its exact shapes.

The independent reference: a profile synthesised from known efficiency constants with the
engine's own time functions (cost_model.hardware.compute, cost_model.terms.layers) at those constants; the
fit must recover them, and an estimate from a profile measured at micro-batch 1 must equal,
at micro-batches 2 and 4, the analytic estimate of the device with the known constants.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from cost_model.estimate import estimate
from cost_model.hardware import calibration, compute
from cost_model.hardware.catalog import get_gpu
from cost_model.hardware.profile_schema import profile_from_dict, profile_to_dict
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import CalibrationProfile, KernelTiming, LayerTiming, ParallelConfig
from cost_model.terms.layers import layer_table
from planner.request.parse import parse_cluster, parse_model, parse_training

DTYPE = "bf16"
# a device unlike the catalog entry (every constant differs from cost_model/hardware/catalog.py h100-sxm)
TRUE_H100 = dict(gemm_max_efficiency=0.78, gemm_half_dim=150.0, memory_bound_efficiency=0.66,
                 attention_efficiency=0.62, kernel_overhead_s=7e-6)
GEMM_DIMS = (256, 512, 1024, 2048, 4096, 8192)
MEM_BYTES = tuple(12 * 2**e for e in (12, 16, 20, 24))
ATT_FLOPS = (1e8, 1e9, 1e10, 1e11)


def _benchmarks(truth, device: str, dims=GEMM_DIMS) -> CalibrationProfile:
    """The micro-benchmarks a device with `truth`'s constants would measure."""
    return CalibrationProfile(
        device=device,
        gemm_tflops={d: 2 * d**3 / compute.gemm_time_s(truth, DTYPE, d, d, d) / 1e12 for d in dims},
        memory_bound=tuple(KernelTiming(b, compute.memory_bound_time_s(truth, b, 1)) for b in MEM_BYTES),
        attention=tuple(KernelTiming(f, compute.flash_attention_time_s(truth, DTYPE, f)) for f in ATT_FLOPS),
        dtype=DTYPE,
    )


def test_fit_recovers_known_constants():
    gpu = get_gpu("h100-sxm")
    truth = dataclasses.replace(gpu, **TRUE_H100)
    fit = calibration.fit_device(gpu, _benchmarks(truth, gpu.name), DTYPE)
    for name, value in TRUE_H100.items():
        assert getattr(fit.gpu, name) == pytest.approx(value, rel=1e-3), name
    assert fit.gpu.peak_tflops == gpu.peak_tflops and fit.gpu.hbm_gb_s == gpu.hbm_gb_s  # inside the bounds
    assert all(err < 1e-3 for err in fit.rms_rel_error.values())
    assert fit.gpu.efficiency_source.startswith("fitted from profile")


def test_a_ceiling_above_the_assumed_peak_moves_the_peak_up():
    # the "cpu" catalog entry assumes 0.1 TFLOP/s and 10 GB/s; a core that does 0.19 and 27
    # is fitted with efficiency 1 at the measured numbers, not clipped at the assumption
    gpu = get_gpu("cpu")
    truth = dataclasses.replace(gpu, peak_tflops={k: 1.9 * v for k, v in gpu.peak_tflops.items()}, hbm_gb_s=27.0,
                                gemm_max_efficiency=1.0, gemm_half_dim=12.0, memory_bound_efficiency=1.0,
                                attention_efficiency=0.3, kernel_overhead_s=3e-6)
    fit = calibration.fit_device(gpu, _benchmarks(truth, "cpu", (64, 128, 256, 512, 1024)), DTYPE)
    assert fit.gpu.gemm_max_efficiency == 1.0 and fit.gpu.memory_bound_efficiency == 1.0
    assert compute.peak_flops(fit.gpu, DTYPE) == pytest.approx(compute.peak_flops(truth, DTYPE), rel=1e-3)
    assert fit.gpu.hbm_gb_s == pytest.approx(27.0, rel=1e-6)
    assert fit.gpu.gemm_half_dim == pytest.approx(12.0, rel=1e-3)
    assert fit.gpu.attention_efficiency == pytest.approx(0.3, rel=1e-3)
    assert "moved up" in fit.gpu.efficiency_source


def test_bounds_keep_constants_physical():
    gpu = get_gpu("h100-sxm")
    # attention faster than the device's peak cannot be an efficiency above 1
    prof = CalibrationProfile(device=gpu.name, attention=(KernelTiming(1e12, 1e-4),), dtype=DTYPE)
    assert calibration.fit_device(gpu, prof, DTYPE).gpu.attention_efficiency == pytest.approx(1.0)
    # a memory-bound sweep whose intercept is negative: the overhead stays at its lower bound
    rows = (KernelTiming(1e6, 1e-6), KernelTiming(1e8, 3e-4))
    fit = calibration.fit_device(gpu, CalibrationProfile(device=gpu.name, memory_bound=rows), DTYPE)
    assert calibration.OVERHEAD_RANGE_S[0] <= fit.gpu.kernel_overhead_s <= calibration.OVERHEAD_RANGE_S[1]
    assert 0 < fit.gpu.memory_bound_efficiency <= 1.0


def test_a_profile_of_another_device_does_not_calibrate():
    gpu = get_gpu("h100-sxm")
    assert calibration.fit_device(gpu, _benchmarks(gpu, "a100-80gb"), DTYPE) is None
    assert calibration.fit_device(gpu, CalibrationProfile(device=gpu.name), DTYPE) is None


MODEL = {"num_layers": 4, "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8,
         "ffn_hidden_size": 14336, "vocab_size": 128256, "mlp": "swiglu"}


def _specs():
    model = parse_model({"transformer": MODEL})
    cluster = parse_cluster({"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8})
    training = parse_training({"global_batch_size": 32, "seq_length": 4096, "dtype": DTYPE})
    return model, cluster, training


def _rows_at(model, cluster, training, tps, mbs, scale=(1.0, 1.0)) -> dict:
    """Layer rows a device with `cluster.gpu`'s constants would measure (x `scale`)."""
    rows = {}
    for tp in tps:
        for mb in mbs:
            table = layer_table(model, cluster, training, ParallelConfig(tp=tp, micro_batch_size=mb))
            for kind, cost in (("block", table.blocks[0]), ("embedding", table.embedding), ("logits", table.output)):
                rows[(kind, tp, mb, training.seq_length)] = LayerTiming(
                    cost.fwd_s * scale[0], (cost.compute_s - cost.fwd_s) * scale[1])
    return rows


@pytest.mark.parametrize("mb", [2, 4])
def test_profile_at_micro_batch_1_prices_micro_batches_2_and_4(mb):
    model, cluster, training = _specs()
    truth = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, **TRUE_H100))
    prof = dataclasses.replace(_benchmarks(truth.gpu, cluster.gpu.name),
                               layers=_rows_at(model, truth, training, (1, 2), (1,)))
    cfg = ParallelConfig(dp=4, tp=2, micro_batch_size=mb)
    with_profile = estimate(model, cluster, training, cfg, prof)
    reference = estimate(model, truth, training, cfg)  # the device with the known constants
    catalog = estimate(model, cluster, training, cfg)
    step = with_profile.prediction.step_time_s
    assert step == pytest.approx(reference.prediction.step_time_s, rel=2e-3)
    assert abs(step / catalog.prediction.step_time_s - 1) > 0.02  # the profile changed it
    assert with_profile.sources["block"] == "profile-fit" and with_profile.sources["output"] == "profile-fit"
    assert catalog.sources["block"] == "analytic"
    # the measured shape is still the measured row
    exact = estimate(model, cluster, training, dataclasses.replace(cfg, micro_batch_size=1), prof)
    assert exact.sources["block"] == "profile"


def test_rows_scale_the_fitted_model_at_other_shapes():
    # rows 1.3x (forward) and 0.8x (backward) the fitted analytic model: a block at a
    # micro-batch and TP degree the profile did not measure gets the same ratios
    model, cluster, training = _specs()
    truth = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, **TRUE_H100))
    prof = dataclasses.replace(_benchmarks(truth.gpu, cluster.gpu.name),
                               layers=_rows_at(model, truth, training, (1,), (1, 2), scale=(1.3, 0.8)))
    cfg = ParallelConfig(tp=4, micro_batch_size=4)
    block = layer_table(model, cluster, training, cfg, prof).blocks[0]
    ref = layer_table(model, truth, training, cfg).blocks[0]
    assert block.fwd_s == pytest.approx(1.3 * ref.fwd_s, rel=2e-3)
    assert block.compute_s - block.fwd_s == pytest.approx(0.8 * (ref.compute_s - ref.fwd_s), rel=2e-3)


def test_schema_reads_and_writes_the_micro_benchmarks():
    gpu = get_gpu("h100-sxm")
    prof = _benchmarks(gpu, gpu.name)
    back = profile_from_dict(profile_to_dict(prof))
    assert back.memory_bound == prof.memory_bound and back.attention == prof.attention
    assert back.dtype == DTYPE and back.gemm_tflops == prof.gemm_tflops
    bad = {**profile_to_dict(prof), "memory_bound": [{"bytes": -1, "time_s": 1e-6}]}
    with pytest.raises(SpecError, match=r"memory_bound\[0\]\.bytes"):
        profile_from_dict(bad)
    with pytest.raises(SpecError, match="dtype"):
        profile_from_dict({**profile_to_dict(prof), "dtype": "int4"})


def test_the_fit_is_cached_per_profile_and_pure():
    gpu = get_gpu("h100-sxm")
    prof = _benchmarks(dataclasses.replace(gpu, **TRUE_H100), gpu.name)
    first = calibration.calibrated_gpu(gpu, prof, DTYPE)
    assert calibration.calibrated_gpu(gpu, prof, DTYPE) is first
    again = calibration.fit_device(gpu, dataclasses.replace(prof), DTYPE).gpu  # an equal, new profile
    assert again == first
    assert math.isclose(first.gemm_half_dim, TRUE_H100["gemm_half_dim"], rel_tol=1e-3)
