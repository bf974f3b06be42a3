"""Pipeline bubble and collective costs.

References:
- Narayanan et al. SC'21 §2.2: with p stages of time t each and m micro-batches, a step
  takes m*t + (p-1)*t (bubble fraction (p-1)/m, GPipe and 1F1B); the interleaved schedule
  with v chunks per rank shrinks the bubble to (p-1)*t/v, fraction (p-1)/(v*m).
- Ring all-reduce (Thakur et al. 2005; Patarasuk & Yuan 2009): 2(n-1) alpha + 2(n-1)/n B/bw.
"""

from __future__ import annotations

import pytest

from cost_model.estimate import estimate, rank_costs, resolve_slices
from cost_model.hardware import comm
from cost_model.hardware.catalog import get_gpu
from cost_model.model.presets import get_preset
from cost_model.pipeline import stages
from cost_model.specs.inputs import (
    ClusterSpec,
    LayerListSpec,
    LayerSpec,
    ParallelConfig,
    TrainingSpec,
)
from cost_model.terms.layers import layer_table


def even(rank_times: list[float], v: int, fwd_share: float = 1 / 3):
    """Per rank, v equal chunks of its time: (chunk_fwd_s, chunk_bwd_s)."""
    f = [[t * fwd_share / v] * v for t in rank_times]
    b = [[t * (1 - fwd_share) / v] * v for t in rank_times]
    return f, b


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (8, 64, 1), (8, 16, 2), (8, 32, 4), (2, 1, 1), (16, 128, 3), (4, 12, 3), (4, 4, 2), (8, 8, 4)])
def test_pipeline_time_uniform_stages(p, m, v):
    t = 0.0123
    got = stages.pipeline_time_s(*even([t] * p, v), m, v, "interleaved" if v > 1 else "1f1b")
    assert got == pytest.approx(m * t + (p - 1) * t / v, rel=1e-12)
    bubble_fraction = (got - m * t) / (m * t)
    assert bubble_fraction == pytest.approx((p - 1) / (v * m), rel=1e-9)


def test_pipeline_time_hand_numbers():
    # p=4, m=8, t=1: 8 + 3 = 11; interleaved v=2: 8 + 1.5 = 9.5
    assert stages.pipeline_time_s(*even([1.0] * 4, 1, 0.5), 8, 1, "1f1b") == 11.0
    assert stages.pipeline_time_s(*even([1.0] * 4, 2, 0.5), 8, 2, "interleaved") == 9.5


def _cluster(gpu="a100-80gb", n=64, per_node=8) -> ClusterSpec:
    g = get_gpu(gpu)
    return ClusterSpec(g, n, per_node, g.nvlink_gb_s, g.network_gb_s, g.intra_node_latency_s, g.inter_node_latency_s)


def _uniform_layers(n: int) -> LayerListSpec:
    # identical layers, no stage-to-stage payload (output_bytes 0) and no embedding/output
    # extras: every pipeline rank has exactly the same time
    layer = LayerSpec("blk", fwd_flops=2e12, params=5e7, activation_bytes=1e8, output_bytes=0.0)
    return LayerListSpec("uniform", tuple([layer] * n))


@pytest.mark.parametrize(
    "p,v,schedule,gb",
    [(4, 1, "1f1b", 16), (4, 1, "gpipe", 32), (4, 2, "interleaved", 16), (8, 3, "interleaved", 64), (2, 4, "interleaved", 8)],
)
def test_estimate_bubble_fraction_uniform(p, v, schedule, gb):
    model = _uniform_layers(p * v * 2)
    cfg = ParallelConfig(dp=1, tp=1, pp=p, vpp=v, schedule=schedule, micro_batch_size=1)
    tr = TrainingSpec(global_batch_size=gb, seq_length=1024)
    est = estimate(model, _cluster(), tr, cfg)
    b = est.prediction.breakdown
    m = est.num_micro_batches
    assert m == gb
    busy = est.prediction.step_time_s - b.bubble_s - b.dp_comm_s - b.optimizer_s
    assert b.bubble_s / busy == pytest.approx((p - 1) / (v * m), rel=1e-9)


@pytest.mark.parametrize(
    "cfg",
    [
        ParallelConfig(dp=2, tp=8, pp=8, micro_batch_size=1),
        ParallelConfig(dp=2, tp=8, pp=4, vpp=3, schedule="interleaved", micro_batch_size=1),
    ],
    ids=["1f1b", "interleaved"],
)
def test_estimate_bubble_with_uneven_ranks(cfg):
    # GPT-3 175B: the first/last ranks carry the embedding and the output layer, so the ranks
    # are not uniform. What is exactly true: the rest of the pipeline time is m * max_r t_r;
    # with one chunk per rank bubble = sum_r t_r - max_r t_r; interleaved, the lock-step form
    # (stages.pipeline_time_s) is at least SC'21's (sum_r t_r - max_r t_r)/v and, the chunks
    # differing only by the embedding / output layer, within a few % of it; the fraction is
    # within a few % of (p-1)/(v m).
    model, cluster = get_preset("gpt3-175b"), _cluster(n=128)
    tr = TrainingSpec(global_batch_size=64, seq_length=2048)
    est = estimate(model, cluster, tr, cfg)
    m = est.num_micro_batches
    table = layer_table(model, cluster, tr, cfg)
    times = [r.time_s for r in rank_costs(table, resolve_slices(model, cfg), cfg, m, cluster)]
    b = est.prediction.breakdown
    sc21 = (sum(times) - max(times)) / cfg.vpp
    if cfg.vpp == 1:
        assert b.bubble_s == pytest.approx(sc21, rel=1e-9)
    else:
        assert sc21 * (1 - 1e-9) <= b.bubble_s <= 1.05 * sc21
    busy = est.prediction.step_time_s - b.bubble_s - b.dp_comm_s - b.optimizer_s
    assert busy == pytest.approx(m * max(times), rel=1e-9)
    ideal = (cfg.pp - 1) / (cfg.vpp * m)
    assert 0.8 * ideal < b.bubble_s / busy <= ideal * (1.05 if cfg.vpp > 1 else 1 + 1e-9)


# ---------------------------------------------------------------- collectives


def test_ring_all_reduce_hand_number():
    # B = 1 GB over n = 8 ranks, alpha = 5 us, bw = 240 GB/s:
    # 2*7*5e-6 = 7.0e-5 s;  2*7/8 * 1e9 / 240e9 = 7.291666...e-3 s;  total 7.3616667e-3 s
    link = comm.Link(240e9, 5e-6, "intra")
    assert comm.all_reduce_s(1e9, 8, link) == pytest.approx(7.3616667e-3, rel=1e-7)


@pytest.mark.parametrize("nbytes,n,alpha,bw", [(1e6, 2, 1e-5, 25e9), (4e8, 24, 1e-5, 20e9), (123.0, 1024, 2e-6, 1e9)])
def test_ring_collectives_formulas(nbytes, n, alpha, bw):
    link = comm.Link(bw, alpha, "inter")
    assert comm.all_reduce_s(nbytes, n, link) == pytest.approx(2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bw, rel=1e-12)
    half = (n - 1) * alpha + (n - 1) / n * nbytes / bw
    assert comm.reduce_scatter_s(nbytes, n, link) == pytest.approx(half, rel=1e-12)
    assert comm.all_gather_s(nbytes, n, link) == pytest.approx(half, rel=1e-12)
    # reduce-scatter + all-gather = all-reduce (same volume, ZeRO §5)
    rs_ag = comm.reduce_scatter_s(nbytes, n, link) + comm.all_gather_s(nbytes, n, link)
    assert rs_ag == pytest.approx(comm.all_reduce_s(nbytes, n, link), rel=1e-12)
    assert comm.send_recv_s(nbytes, link) == pytest.approx(alpha + nbytes / bw, rel=1e-12)


def test_single_rank_collectives_are_free():
    link = comm.Link(1e9, 1e-5, "intra")
    assert comm.all_reduce_s(1e9, 1, link) == 0.0
    assert comm.all_gather_s(1e9, 1, link) == 0.0


def test_group_placement():
    c = _cluster(n=1536, per_node=8)
    eff = c.gpu.link_efficiency
    tp = comm.group_link(c, 8, 1)  # tp = 8 on one 8-GPU node
    assert tp.level == "intra"
    assert tp.bandwidth_bytes_s == pytest.approx(c.intra_node_gb_s * 1e9 * eff)
    assert tp.latency_s == c.intra_node_latency_s
    dp = comm.group_link(c, 24, 8)  # dp group, members 8 ranks apart: one per node
    assert dp.level == "inter"
    assert dp.bandwidth_bytes_s == pytest.approx(c.inter_node_gb_s * 1e9 * eff)
    assert comm.group_link(c, 2, 4).level == "intra"  # 2 ranks 4 apart: same node
    assert comm.group_link(c, 16, 1).level == "inter"  # outgrows the node
    assert comm.group_link(c, 1, 64).level == "intra"  # a group of one never leaves its GPU


def test_zero3_gathers_scatter_and_buffer_copies():
    """ZeRO-3 per micro-batch, one generic layer with no compute to hide behind (fwd_flops
    0): forward all-gather, backward all-gather of the 16-bit parameters + reduce-scatter of
    the gradients in the engine's reduce dtype (Megatron: grad_dtype, fp32 here), all
    exposed, plus the copy-out / copy-in of 2 W + G bytes at HBM speed (3 kernels)."""
    c = _cluster(n=8, per_node=8)
    params = 1e9
    layer = LayerSpec("blk", fwd_flops=0.0, params=params, activation_bytes=1e6, output_bytes=0.0)
    t = TrainingSpec(global_batch_size=8, seq_length=2048, dtype="bf16")
    cfg = ParallelConfig(dp=8, zero=3, micro_batch_size=1)
    lc = layer_table(LayerListSpec("m", (layer,)), c, t, cfg).blocks[0]
    w = 2 * params  # bf16 bytes
    gr = 4 * params  # fp32 gradients
    link = comm.group_link(c, 8, 1)
    gathers = 2 * comm.all_gather_s(w, 8, link) + comm.reduce_scatter_s(gr, 8, link)
    g = c.gpu
    copies = 2 * (2 * w + gr) / (g.hbm_gb_s * 1e9 * g.memory_bound_efficiency) + 3 * g.kernel_overhead_s
    # the layer's forward is one kernel launch (kernel_overhead_s) and hides a little
    hidden_fwd, hidden_bwd = lc.fwd_s, lc.compute_s - lc.fwd_s
    gamma = g.overlap_interference
    exposed = (comm.all_gather_s(w, 8, link) - (1 - gamma) * hidden_fwd) + \
              (comm.all_gather_s(w, 8, link) + comm.reduce_scatter_s(gr, 8, link) - (1 - gamma) * hidden_bwd)
    assert lc.zero3_comm_s == pytest.approx(exposed + copies, rel=1e-9)
    assert copies > 0.1 * gathers  # not negligible: 6 W bytes through HBM vs 3 W over NVLink
