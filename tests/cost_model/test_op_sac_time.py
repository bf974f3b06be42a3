"""torchtitan's per-op selective AC priced as it runs (torchtitan 0.3.0
torchtitan/distributed/activation_checkpoint.py SelectiveAC): in the backward a dense block
re-runs every second mm of its forward (wk, wo, w3 for Llama), all the ops outside the save
list (norms, residual adds, RoPE, SiLU and the product) and, with TP, the all-gathers of its
sequence-parallel inputs; the attention core and the reduce-scatters are saved."""

from __future__ import annotations

import pytest

from cost_model.estimate import estimate
from cost_model.hardware import compute
from cost_model.hardware.catalog import get_gpu
from cost_model.model.presets import get_preset
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec
from cost_model.terms.compute import block_compute, elementwise_fwd_s, gemms_fwd_s
from cost_model.terms.geometry import geometry
from cost_model.terms.layers import layer_table
from cost_model.terms.tp import block_tp_fwd_s

GPU = get_gpu("h100-sxm")
LLAMA3_8B = get_preset("llama3-8b")
TRAINING = TrainingSpec(global_batch_size=16, seq_length=8192)


def _cluster(n: int) -> ClusterSpec:
    return ClusterSpec(GPU, n, 8, GPU.nvlink_gb_s, GPU.network_gb_s, GPU.intra_node_latency_s,
                       GPU.inter_node_latency_s)


def _block(cfg: ParallelConfig, training: TrainingSpec = TRAINING):
    table = layer_table(LLAMA3_8B, _cluster(8), training, cfg)
    return table.blocks[0]


def test_recomputes_wk_wo_w3_and_the_elementwise_ops():
    """Llama 3 8B (Llama 3 paper Table 3: hidden 4096, 8 KV heads of 128, FFN 14336) at tp=1:
    the extra forward is exactly the wk (4096 -> 1024), wo (4096 -> 4096) and w3 (4096 ->
    14336) GEMMs plus the block's elementwise forward, shapes written out here by hand."""
    cfg = ParallelConfig(dp=8, micro_batch_size=2, zero=3, recompute="selective", engine="torchtitan")
    tokens = 2 * 8192
    want_gemms = sum(compute.gemm_time_s(GPU, "bf16", tokens, n, 4096) for n in (1024, 4096, 14336))
    geo = geometry(LLAMA3_8B, TRAINING, cfg, 0)
    elem = elementwise_fwd_s(LLAMA3_8B, GPU, cfg, geo, gemms_fwd_s(LLAMA3_8B, GPU, TRAINING, cfg, geo).ffn_elems)
    assert _block(cfg).recompute_selective_s == pytest.approx(want_gemms + elem, rel=1e-12)
    # about 3/8 of the forward GEMM FLOPs: (1024 + 4096 + 14336) / (2*4096 + 2*1024 + 3*14336)
    c = block_compute(LLAMA3_8B, GPU, TRAINING, cfg, geo, None)
    share = want_gemms / gemms_fwd_s(LLAMA3_8B, GPU, TRAINING, cfg, geo).total_s
    assert share == pytest.approx(19456 / 53248, rel=0.1)
    assert c.op_sac_recompute_s < c.fwd_s


def test_sequence_parallel_gathers_are_repeated_reduce_scatters_saved():
    """tp=8 with SP: the ring all-gather and reduce-scatter of a b*s*h activation cost the
    same (comm.py), torchtitan has no TP overlap in its plans, so the repeated gathers are
    half of the block's forward TP time."""
    cfg = ParallelConfig(dp=1, tp=8, micro_batch_size=1, sequence_parallel=True, recompute="selective",
                         engine="torchtitan")
    geo = geometry(LLAMA3_8B, TRAINING, cfg, 0)
    c = block_compute(LLAMA3_8B, GPU, TRAINING, cfg, geo, None)
    tp_fwd = block_tp_fwd_s(LLAMA3_8B, _cluster(8), cfg, geo, c, None)
    assert tp_fwd > 0
    assert _block(cfg).recompute_selective_s == pytest.approx(c.op_sac_recompute_s + tp_fwd / 2, rel=1e-9)


def test_megatron_selective_with_flash_attention_repeats_nothing():
    """Korthikanti's selective recomputes the attention core only, which FlashAttention
    never keeps: no extra time (Megatron, flash)."""
    cfg = ParallelConfig(dp=8, micro_batch_size=2, recompute="selective", engine="megatron")
    assert _block(cfg).recompute_selective_s == 0.0


def test_selective_is_slower_than_none_where_both_fit():
    """The order a user sees: with memory to spare, no recompute is the faster plan."""
    t = TrainingSpec(global_batch_size=16, seq_length=2048)
    base = dict(dp=8, micro_batch_size=1, zero=3, engine="torchtitan")
    none = estimate(LLAMA3_8B, _cluster(8), t, ParallelConfig(**base, recompute="none"))
    sel = estimate(LLAMA3_8B, _cluster(8), t, ParallelConfig(**base, recompute="selective"))
    assert none.fits and sel.fits
    assert sel.prediction.step_time_s > none.prediction.step_time_s * 1.03
    assert sel.prediction.memory.peak_gib < none.prediction.memory.peak_gib
