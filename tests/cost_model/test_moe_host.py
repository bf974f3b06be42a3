"""Host-bound MoE layers (moe.host_issue_s, compute.host_bound_excess_s): Megatron-Core's
dispatcher synchronises with the host in every MoE layer, so a layer takes at least the
host's issue of its kernels. Checked against a hand count, the max rule it states, the
regimes it separates (micro-batch, local experts, engine) and the published pair that shows
it (Qwen3-30B-A3B on DGX B200 at MBS 1 against GB200 at MBS 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_model.hardware.catalog import HOST_OP_S, get_gpu
from cost_model.model.presets import get_preset
from cost_model.specs.inputs import ParallelConfig, TrainingSpec
from cost_model.terms import moe
from cost_model.terms.compute import block_compute, host_bound_excess_s
from cost_model.terms.geometry import geometry
from cost_model.terms.layers import layer_table

from .test_moe import _cluster

QWEN30 = get_preset("qwen3-30b-a3b")
T_FP8 = TrainingSpec(global_batch_size=512, seq_length=4096, dtype="fp8")


def _block(gpu: str, cfg: ParallelConfig, t: TrainingSpec = T_FP8, n: int = 8):
    return layer_table(QWEN30, _cluster(gpu, n=n), t, cfg).blocks[0]


def test_host_issue_hand_count():
    """Qwen3-30B-A3B, ep8 (16 local experts), fp8: the MoE block's 106 + 114 kernels
    (test_moe's hand count) and the layer's attention part 12 + 18, at host_op_s each."""
    g = get_gpu("b200")
    cfg = ParallelConfig(dp=8, ep=8, micro_batch_size=1)
    lay = moe.layout(QWEN30, T_FP8, cfg)
    assert moe.LAYER_ATTENTION_KERNELS == (12, 18)
    fwd, bwd = moe.host_issue_s(QWEN30, g, cfg, lay, 1)
    assert fwd == pytest.approx((106 + 12) * g.host_op_s)
    assert bwd == pytest.approx((114 + 18) * g.host_op_s)
    assert g.host_op_s == HOST_OP_S
    assert get_gpu("cpu").host_op_s == 0.0
    # the overlapped 1F1B's schedule nodes: 4 forward calls, 4 backward + 2 weight-gradient calls
    fwd_o, bwd_o = moe.host_issue_s(QWEN30, g, replace(cfg, moe_a2a_overlap=True), lay, 1)
    assert (fwd_o - fwd, bwd_o - bwd) == pytest.approx((4 * g.host_op_s, 6 * g.host_op_s))


def test_layer_takes_the_larger_of_host_and_device():
    """At MBS 1 the layer's device time (compute + exposed all-to-all) is below the host's
    issue, and the layer costs exactly the host's time; the wait sits in compute_s, split
    between the passes as the kernels are (forward 118 of 250)."""
    cfg = ParallelConfig(dp=8, ep=8, micro_batch_size=1)
    b = _block("b200", cfg)
    host = sum(moe.host_issue_s(QWEN30, get_gpu("b200"), cfg, moe.layout(QWEN30, T_FP8, cfg), 1))
    assert b.host_wait_s > 0
    assert b.time_s == pytest.approx(host)
    no_host = replace(get_gpu("b200"), host_op_s=0.0)
    from cost_model.specs.inputs import ClusterSpec
    cl = _cluster("b200", n=8)
    b0 = layer_table(QWEN30, ClusterSpec(no_host, 8, 8, cl.intra_node_gb_s, cl.inter_node_gb_s,
                                        cl.intra_node_latency_s, cl.inter_node_latency_s), T_FP8, cfg).blocks[0]
    assert b0.host_wait_s == 0.0
    assert b.time_s - b0.time_s == pytest.approx(b.host_wait_s)
    assert b.fwd_s - b0.fwd_s == pytest.approx(b.host_wait_s * 118 / 250)
    # a fully recomputed layer re-issues its forward: the forward's share of the wait again
    assert b.recompute_full_s - b0.recompute_full_s == pytest.approx(b.host_wait_s * 118 / 250)


def test_regimes_micro_batch_experts_and_engine():
    """More tokens per micro-batch make the device the bound (MBS 8: no wait); fewer local
    experts fewer kernels (ep 32 leaves 4 of 128 local: less wait than ep 8 at MBS 1 on the
    same tokens); torchtitan's experts are not Megatron's per-expert kernels and its wait is
    not priced (kernels.EngineKernels.moe_host_sync); dense blocks never wait."""
    one = _block("b200", ParallelConfig(dp=8, ep=8, micro_batch_size=1))
    eight = _block("b200", ParallelConfig(dp=8, ep=8, micro_batch_size=8))
    assert one.host_wait_s > 0 and eight.host_wait_s == 0.0
    ep32 = _block("b200", ParallelConfig(dp=32, ep=32, micro_batch_size=1), n=32)
    assert ep32.host_wait_s < one.host_wait_s
    tt = _block("b200", ParallelConfig(dp=8, ep=8, micro_batch_size=1, engine="torchtitan"),
                t=replace(T_FP8, dtype="bf16"))
    assert tt.host_wait_s == 0.0
    dense = layer_table(get_preset("llama3-8b"), _cluster("b200", n=8), T_FP8,
                        ParallelConfig(dp=8, micro_batch_size=1)).blocks[0]
    assert dense.host_wait_s == 0.0


def test_published_b200_mbs1_against_gb200_mbs4():
    """Megatron-Bridge 26.02 (docs/performance-summary-archive.md @067f987df03b, Qwen3-30B-A3B
    MXFP8, 8 GPUs, EP8, GBS 512): DGX B200 at MBS 1 took 27.05 s a step, GB200 at MBS 4 10.05 s,
    2.69x. The two parts' datasheet rates differ by 10%; the rest is the MBS 1 run's
    64 micro-batches each waiting on the host. The layer model alone (one MoE layer,
    forward + backward, times the micro-batches, MXFP8 as both runs) gives 3.17x with the host
    floor (within 20%; 3.08x when the GB200 run's casts were priced as current scaling, whose
    amax pass MXFP8 does not have) and 1.41x without it."""
    b200 = _block("b200", ParallelConfig(dp=8, ep=8, micro_batch_size=1))
    gb200 = _block("gb200", ParallelConfig(dp=8, ep=8, micro_batch_size=4))
    ratio = 64 * b200.time_s / (16 * gb200.time_s)
    ratio_device = 64 * (b200.time_s - b200.host_wait_s) / (16 * (gb200.time_s - gb200.host_wait_s))
    assert gb200.host_wait_s == 0.0
    assert ratio_device < 1.5
    assert ratio == pytest.approx(27.05 / 10.05, rel=0.20)


def test_profiled_blocks_are_not_floored():
    """A block whose time a profile measured holds the host's issue already: no wait is added."""
    cfg = ParallelConfig(dp=8, ep=8, micro_batch_size=1)
    geo = geometry(QWEN30, T_FP8, cfg, 0)
    c = block_compute(QWEN30, get_gpu("b200"), T_FP8, cfg, geo, None)
    assert host_bound_excess_s(QWEN30, get_gpu("b200"), T_FP8, cfg, geo, c, 0.0)[0] > 0
    measured = replace(c, source="profile")
    assert host_bound_excess_s(QWEN30, get_gpu("b200"), T_FP8, cfg, geo, measured, 0.0) == (0.0, 0.0)


def test_estimate_and_plan_say_when_layers_are_host_bound():
    """The Estimate's notes name the host-bound layers and the wait per step (m x the
    layers' waits / pp); a device-bound configuration has no such note. A plan's reasons
    carry the note (planner.reasons.plan_reasons)."""
    from cost_model.estimate import estimate
    from planner.reasons import plan_reasons

    cl = _cluster("b200", n=8)
    cfg = ParallelConfig(dp=8, ep=8, micro_batch_size=1)
    est = estimate(QWEN30, cl, T_FP8, cfg)
    blocks = layer_table(QWEN30, cl, T_FP8, cfg).blocks
    m = T_FP8.global_batch_size // 8
    (note,) = est.notes
    assert note.startswith(f"{QWEN30.num_layers} of {QWEN30.num_layers} MoE layers are host-bound")
    assert f"{m * sum(b.host_wait_s for b in blocks):.3g} s per step" in note
    assert note in plan_reasons(est, cfg, cl, QWEN30)
    assert estimate(QWEN30, cl, T_FP8, replace(cfg, micro_batch_size=8)).notes == ()
