"""Monotonic physics of the estimate: each is a real inequality that any
sane cost model satisfies, whatever its constants."""

from __future__ import annotations

import pytest

from cost_model.estimate import estimate
from cost_model.model.presets import get_preset
from cost_model.pipeline import stages
from cost_model.specs.inputs import ParallelConfig, TrainingSpec
from planner.request.parse import parse_cluster


def _cluster(n: int, gpu: str = "a100-80gb"):
    return parse_cluster({"gpu": gpu, "num_gpus": n, "gpus_per_node": 8})


def _est(model: str, n: int, gb: int, seq: int = 2048, gpu: str = "a100-80gb", **cfg):
    return estimate(get_preset(model), _cluster(n, gpu), TrainingSpec(gb, seq), ParallelConfig(**cfg))


def _bubble_fraction(est) -> float:
    b = est.prediction.breakdown
    return b.bubble_s / (est.prediction.step_time_s - b.bubble_s - b.dp_comm_s - b.optimizer_s)


def test_more_micro_batches_smaller_bubble_fraction():
    fracs = [_bubble_fraction(_est("gpt-39b", 64, gb, tp=8, pp=8, dp=1)) for gb in (8, 16, 64, 256)]
    assert all(a > b for a, b in zip(fracs, fracs[1:], strict=False))
    pipe = [stages.pipeline_time_s([[1 / 3]] * 8, [[2 / 3]] * 8, m, 1, "1f1b") / m - 1 for m in (8, 16, 64, 256)]
    assert all(a > b for a, b in zip(pipe, pipe[1:], strict=False))


def test_interleaving_shrinks_bubble():
    plain = _est("gpt-39b", 64, 32, tp=8, pp=4, dp=2)
    inter = _est("gpt-39b", 64, 32, tp=8, pp=4, dp=2, vpp=3, schedule="interleaved")
    assert inter.prediction.breakdown.bubble_s < plain.prediction.breakdown.bubble_s


@pytest.mark.parametrize("sp", [False, True])
def test_full_recompute_less_memory_more_time(sp):
    kw = dict(tp=8, pp=8, dp=1, sequence_parallel=sp)
    none = _est("gpt3-175b", 64, 64, recompute="none", **kw)
    sel = _est("gpt3-175b", 64, 64, recompute="selective", **kw)
    full = _est("gpt3-175b", 64, 64, recompute="full", **kw)
    pn, ps, pf = none.prediction, sel.prediction, full.prediction
    assert pf.memory.activations_gib < ps.memory.activations_gib <= pn.memory.activations_gib
    assert pf.step_time_s > pn.step_time_s
    assert pf.breakdown.recompute_s > 0 == pn.breakdown.recompute_s
    assert pf.hfu > pf.mfu  # recomputed FLOPs count as hardware FLOPs only
    assert pn.hfu == pytest.approx(pn.mfu)


def test_zero_stages_reduce_memory():
    peaks = [
        _est("gpt-7.5b", 64, 512, tp=2, pp=1, dp=32, zero=z).prediction.memory
        for z in (0, 1, 2, 3)
    ]
    # each stage shards one more state: strictly less model-state memory, and less peak
    states = [m.weights_gib + m.grads_gib + m.optimizer_gib for m in peaks]
    assert states[0] > states[1] > states[2] > states[3]
    assert peaks[0].peak_gib > peaks[1].peak_gib > peaks[3].peak_gib
    assert peaks[2].peak_gib < peaks[1].peak_gib


def test_doubling_dp_at_fixed_batch_is_faster():
    a = _est("gpt-7.5b", 32, 512, tp=4, pp=2, dp=4)
    b = _est("gpt-7.5b", 64, 512, tp=4, pp=2, dp=8)
    c = _est("gpt-7.5b", 128, 512, tp=4, pp=2, dp=16)
    assert a.prediction.step_time_s > b.prediction.step_time_s > c.prediction.step_time_s
    assert c.prediction.tokens_per_s > b.prediction.tokens_per_s > a.prediction.tokens_per_s


def test_faster_gpu_is_faster():
    a100 = _est("gpt-7.5b", 32, 256, gpu="a100-80gb", tp=4, pp=2, dp=4)
    h100 = _est("gpt-7.5b", 32, 256, gpu="h100-sxm", tp=4, pp=2, dp=4)
    assert h100.prediction.step_time_s < a100.prediction.step_time_s


def test_estimate_is_deterministic():
    kw = dict(tp=8, pp=8, dp=24, micro_batch_size=1, recompute="full")
    a = _est("gpt3-175b", 1536, 1536, **kw).to_dict()
    b = _est("gpt3-175b", 1536, 1536, **kw).to_dict()
    assert a == b


def test_acceptance_gpt3_175b_on_1536_a100():
    # Narayanan et al. SC'21 Table 1 row: 175B on 1536 A100s, t=8 p=8 d=24, B=1536: 153 TFLOP/s
    # per GPU = 44-52% of peak. The estimate must fit and land in a plausible MFU band.
    est = _est("gpt3-175b", 1536, 1536, tp=8, pp=8, dp=24, micro_batch_size=1, recompute="full")
    p = est.prediction
    assert est.fits
    assert p.memory.peak_gib <= p.memory.capacity_gib
    assert 0.30 < p.mfu < 0.60
    assert p.mfu < p.hfu < 1.0
    assert est.num_micro_batches == 64
    b = p.breakdown
    total = sum(vars(b).values())
    assert total == pytest.approx(p.step_time_s, rel=1e-9)
    assert p.tokens_per_s == pytest.approx(1536 * 2048 / p.step_time_s, rel=1e-12)




@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_sequence_parallel_reduces_activation_memory(recompute):
    kw = dict(tp=8, pp=8, dp=1, recompute=recompute)
    off = _est("gpt3-175b", 64, 64, sequence_parallel=False, **kw).prediction.memory.activations_gib
    on = _est("gpt3-175b", 64, 64, sequence_parallel=True, **kw).prediction.memory.activations_gib
    assert on < off


def test_sequence_parallel_reduces_elementwise_compute():
    # SP splits the LayerNorm/dropout/residual work across the TP ranks; GEMMs and
    # attention are unchanged, so per-rank compute must not grow
    kw = dict(tp=8, pp=8, dp=1, recompute="selective")
    off = _est("gpt3-175b", 64, 64, sequence_parallel=False, **kw).prediction.breakdown.compute_s
    on = _est("gpt3-175b", 64, 64, sequence_parallel=True, **kw).prediction.breakdown.compute_s
    assert on < off
