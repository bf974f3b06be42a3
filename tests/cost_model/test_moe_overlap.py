"""Megatron-Core's overlapped 1F1B expert all-to-all (--overlap-moe-expert-parallel-comm,
ParallelConfig.moe_a2a_overlap): the two-stream combined step against hand counts and its
bounds, the step time against the schedule's own accounting (first forward and last backward
alone), the extra warm-up micro-batch against a replay of Megatron's order, and the rules."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from cost_model.estimate import estimate, simulate_config
from cost_model.model.presets import get_preset
from cost_model.pipeline.in_flight import interleaved_live_chunks, peak_in_flight_bytes
from cost_model.pipeline.order import rank_order
from cost_model.pipeline.stages import rank_cost, slices_from_counts
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig, TrainingSpec
from cost_model.terms import moe
from cost_model.terms.layers import layer_table
from cost_model.validate import validate_config

from .test_moe import _cluster

QWEN30 = get_preset("qwen3-30b-a3b")
T = TrainingSpec(global_batch_size=256, seq_length=4096)


def test_combined_step_hand_count():
    """One layer pair by hand (interference 0): forward attn 1, experts 1, each all-to-all 0.5;
    backward attn 1 + wgrad 1, experts 1 + wgrad 1. The comm stream's 2 s hide under the
    compute stream's 6 s: the chain of layers advances 6 s per layer, saving all 2 s. With
    interference 0.2 the hidden 2 s cost 0.4 s."""
    f = moe.PassParts(attn=1.0, mlp=1.0, dispatch=0.5, combine=0.5)
    b = moe.PassParts(attn=1.0, mlp=1.0, dispatch=0.5, combine=0.5, attn_wgrad=1.0, mlp_wgrad=1.0)
    assert f.alone_s + b.alone_s == 8.0
    assert moe.combined_pair_s(f, b, 0.0) == pytest.approx(6.0)
    assert moe.combined_saving_s(f, b, 0.0) == pytest.approx(2.0)
    assert moe.combined_pair_s(f, b, 0.2) == pytest.approx(6.4)
    assert moe.combined_saving_s(f, b, 0.2) == pytest.approx(1.6)
    # no communication: nothing to hide, nothing saved
    z = replace(f, dispatch=0.0, combine=0.0), replace(b, dispatch=0.0, combine=0.0)
    assert moe.combined_saving_s(*z, 0.2) == pytest.approx(0.0)
    # communication only: the comm stream runs its four all-to-alls in a row
    c = moe.PassParts(0.0, 0.0, 1.0, 1.0), moe.PassParts(0.0, 0.0, 1.0, 1.0)
    assert moe.combined_pair_s(*c, 0.0) == pytest.approx(4.0)
    assert moe.combined_saving_s(*c, 0.0) == pytest.approx(0.0)


def test_combined_step_bounds_on_random_parts():
    """The combined step is never faster than either stream's work, never slower than the two
    passes one after the other (plus interference), and saves at most the all-to-alls."""
    rng = random.Random(1)
    for _ in range(500):
        f = moe.PassParts(*(rng.uniform(0, 2) for _ in range(4)))
        b = moe.PassParts(*(rng.uniform(0, 2) for _ in range(6)))
        comp = f.attn + f.mlp + b.attn + b.mlp + b.attn_wgrad + b.mlp_wgrad
        comm = f.dispatch + f.combine + b.dispatch + b.combine
        pair = moe.combined_pair_s(f, b, 0.0)
        assert max(comp, comm) - 1e-9 <= pair <= f.alone_s + b.alone_s + 1e-9
        assert 0.0 <= moe.combined_saving_s(f, b, 0.2) <= comm + 1e-12


def _cfg(**kw) -> ParallelConfig:
    base = dict(dp=8, tp=1, pp=1, ep=8, micro_batch_size=1, zero=1)
    return ParallelConfig(**{**base, **kw})


def test_layer_keeps_the_total_all_to_all_time():
    """With the overlap, an MoE block's exposed all-to-all (combined) plus what running alone
    adds back is the exposed time without it; dense blocks and ep = 1 have nothing to hide."""
    off = layer_table(QWEN30, _cluster(n=64), T, _cfg())
    on = layer_table(QWEN30, _cluster(n=64), T, _cfg(moe_a2a_overlap=True))
    assert on.combined_1f1b and not off.combined_1f1b
    b_off, b_on = off.blocks[0], on.blocks[0]
    assert b_on.ep_unpaired_s > 0.1 * b_off.ep_comm_s
    assert b_on.ep_comm_s + b_on.ep_unpaired_s == pytest.approx(b_off.ep_comm_s)
    # the device's compute is the same; the overlap shortens the device time, so the
    # host's issue of the layer's kernels may bound more of it (moe.host_issue_s)
    assert b_on.compute_s - b_on.host_wait_s == pytest.approx(b_off.compute_s - b_off.host_wait_s)
    assert b_on.host_wait_s >= b_off.host_wait_s
    one = layer_table(QWEN30, _cluster(n=64), T, _cfg(ep=1, moe_a2a_overlap=True))
    assert one.blocks[0].ep_unpaired_s == 0.0


def test_pp1_step_pays_the_first_forward_and_last_backward_alone():
    """pp = 1 (combined_1f1b_schedule_for_no_pipelining): micro-batch 0's forward alone, then
    (F i+1, B i) combined, micro-batch m-1's backward alone. So the step is the one without
    the overlap less (m - 1) x the saving of the model's blocks; the schedule simulation of
    that order gives the same pipeline time."""
    cl = _cluster(n=64)
    cfg = _cfg()
    m = cfg.micro_batches(T.global_batch_size)
    on_cfg = replace(cfg, moe_a2a_overlap=True)
    est_off, est_on = estimate(QWEN30, cl, T, cfg), estimate(QWEN30, cl, T, on_cfg)
    on_blocks, off_blocks = layer_table(QWEN30, cl, T, on_cfg).blocks, layer_table(QWEN30, cl, T, cfg).blocks
    saving = sum(b.ep_unpaired_s for b in on_blocks)
    # the shorter device time leaves more of each micro-batch's layers waiting on the host's
    # kernel issue (LayerCost.host_wait_s, in compute_s): paid by all m micro-batches
    host_more = sum(b.host_wait_s for b in on_blocks) - sum(b.host_wait_s for b in off_blocks)
    assert saving > 0 and host_more < saving
    want = (m - 1) * saving - m * host_more
    got = est_off.prediction.step_time_s - est_on.prediction.step_time_s
    assert got == pytest.approx(want, rel=1e-9)
    sim_off, sim_on = simulate_config(QWEN30, cl, T, cfg), simulate_config(QWEN30, cl, T, on_cfg)
    assert sim_off.pipeline_time_s - sim_on.pipeline_time_s == pytest.approx(want, rel=1e-9)
    # memory: one block's activations more in flight (the forward's layer beside the
    # backward's rest), the saved micro-batch count unchanged
    slices = slices_from_counts([QWEN30.num_layers], None)
    on_t, off_t = layer_table(QWEN30, cl, T, on_cfg), layer_table(QWEN30, cl, T, cfg)
    r_on = rank_cost(on_t, slices, 0, 1, "none", "1f1b", m, 1)
    r_off = rank_cost(off_t, slices, 0, 1, "none", "1f1b", m, 1)
    assert r_on.transient_bytes - r_off.transient_bytes == pytest.approx(on_t.blocks[0].act.none)
    assert r_on.activations_bytes == pytest.approx(r_off.activations_bytes)
    assert est_on.prediction.memory.peak_gib > est_off.prediction.memory.peak_gib


def test_interleaved_extra_warmup_forward_replayed():
    """One more warm-up forward (get_pp_rank_microbatches under the overlap): the held chunks
    equal a replay of rank_order with that warm-up, and the rank holds one chunk more."""
    for pp, vpp, m in [(2, 2, 8), (4, 2, 8), (4, 3, 12), (8, 2, 16)]:
        for r in range(pp):
            peak_plain = max(sum(v) for v in interleaved_live_chunks(pp, r, m, vpp))
            peak = max(sum(v) for v in interleaved_live_chunks(pp, r, m, vpp, 1))
            live = best = 0
            for kind, _, _ in rank_order("interleaved", pp, r, m, vpp, warmup_extra=1):
                live += 1 if kind == "F" else -1
                best = max(best, live)
            assert peak == best
            assert peak == min(m * vpp, peak_plain + 1)
            ones = (1.0,) * vpp
            assert peak_in_flight_bytes("interleaved", pp, r, m, vpp, ones, 1) == peak


def test_interleaved_overlap_estimate_is_above_its_simulation():
    """The lock-step form with the warm-up and cool-down slots priced alone stays an upper
    bound of the simulated order (stages.py), as without the overlap."""
    model = get_preset("qwen3-235b-a22b")
    cl = _cluster(n=256)
    t = TrainingSpec(global_batch_size=512, seq_length=4096)
    cfg = ParallelConfig(dp=8, tp=2, pp=16, vpp=3, schedule="interleaved", ep=8, sequence_parallel=True,
                         micro_batch_size=1, zero=1, moe_a2a_overlap=True)
    est = estimate(model, cl, t, cfg)
    sim = simulate_config(model, cl, t, cfg)
    assert sim.step_time_s <= est.prediction.step_time_s * (1 + 1e-9)
    assert est.prediction.step_time_s < estimate(model, cl, t, replace(cfg, moe_a2a_overlap=False)).prediction.step_time_s


@pytest.mark.parametrize("kw,match", [
    (dict(pp=2, vpp=1), "virtual_pipeline_model_parallel_size must be specified"),
    (dict(ep=1), "only supported with expert model parallelism"),
    (dict(recompute="full"), "disable full recomputation"),
    (dict(engine="torchtitan"), "no overlapped 1F1B"),
])
def test_validator_refuses_what_the_engine_refuses(kw, match):
    cfg = replace(_cfg(moe_a2a_overlap=True), **kw)
    if cfg.pp > 1:
        cfg = replace(cfg, dp=4)
    with pytest.raises(SpecError, match=match) as err:
        validate_config(QWEN30, _cluster(n=64), T, cfg)
    assert err.value.field == "parallelism.moe_a2a_overlap"


def test_validator_refuses_a_dense_model():
    with pytest.raises(SpecError, match="needs an MoE model"):
        validate_config(get_preset("llama3-8b"), _cluster(n=64), T, _cfg(ep=1, moe_a2a_overlap=True))
