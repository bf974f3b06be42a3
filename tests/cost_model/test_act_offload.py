"""Activation offload's price against hand formulas (terms/act_offload.py): the freed bytes are
the Korthikanti et al. 2022 §4.1 attention terms of the offloaded modules' saved tensors
(16-bit: q 2sbh/t, k and v 2sb(g d)/t each under GQA, the core's output 2sbh/t; with sequence
parallelism the norm input and the QKV input 2sbh/t each), only tensors of at least 1024*1024
elements (Megatron-Core's min_offloaded_tensor_size); the copies cost time only beyond the
block's compute; engines other than Megatron refuse it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_model.estimate import estimate
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.results import GIB
from cost_model.terms.layers import layer_table
from planner.request.parse import parse_cluster, parse_model, parse_training

MODEL = parse_model("llama3-70b")
H, A, G, D, LAYERS = 8192, 64, 8, 128, 80  # Llama 3 70B (Meta's config.json)
TP = 8
CLUSTER = parse_cluster({"gpu": "h100-sxm", "num_gpus": 8})
BASE = dict(tp=TP, pp=1, dp=1, zero=1, sequence_parallel=True, recompute="none")


def _training(seq: int):
    return parse_training({"global_batch_size": 64, "seq_length": seq})


def _pair(level: str, seq: int = 8192, cluster=CLUSTER):
    t = _training(seq)
    off = estimate(MODEL, cluster, t, ParallelConfig(**BASE))
    on = estimate(MODEL, cluster, t, ParallelConfig(**BASE, activation_offload=level))
    return off, on


def test_model_is_the_one_the_references_describe():
    assert (MODEL.hidden_size, MODEL.num_attention_heads, MODEL.num_kv_heads, MODEL.kv_channels,
            MODEL.num_layers) == (H, A, G, D, LAYERS)


@pytest.mark.parametrize("level, extra", [("attn", 0), ("attn_qkv", 2)])
def test_freed_bytes_are_the_offloaded_inputs(level, extra):
    """s = 8192, b = 1, t = 8: q and the output 2sbh/t each, k and v 2sb(gd)/t each (exactly
    1024*1024 elements each: offloaded); attn_qkv adds the norm input and the QKV input, 2sbh/t
    each under SP. One micro-batch in flight (pp 1), every one of the 80 blocks."""
    s = 8192
    freed = (2 * s * H / TP) * (2 + extra) + 2 * (2 * s * G * D / TP)
    off, on = _pair(level, s)
    saved_gib = off.prediction.memory.activations_gib - on.prediction.memory.activations_gib
    assert saved_gib == pytest.approx(LAYERS * freed / GIB, rel=1e-9)
    # the engine holds two blocks' freed bytes at the backward (the block in backward, the one reloading)
    t = _training(s)
    held = (layer_table(MODEL, CLUSTER, t, ParallelConfig(**BASE, activation_offload=level)).zero3_buffer_bytes
            - layer_table(MODEL, CLUSTER, t, ParallelConfig(**BASE)).zero3_buffer_bytes)
    assert held == pytest.approx(2 * freed, rel=1e-9)


def test_host_memory_is_the_copies_of_every_gpu():
    """Copied: q, k, v, the output by core_attn, the output again by attn_proj; 8 GPUs per node."""
    s = 8192
    copied = 3 * (2 * s * H / TP) + 2 * (2 * s * G * D / TP)
    off, on = _pair("attn", s)
    assert off.prediction.memory.host_gib == 0
    assert on.prediction.memory.host_gib == pytest.approx(8 * LAYERS * copied / GIB, rel=1e-9)


def test_small_tensors_stay_on_the_gpu():
    """s = 4096: k and v have sb(gd)/t = 524288 elements, under Megatron's 1024*1024 threshold
    (tensor_need_offloading_checker): only q and the output leave the GPU."""
    s = 4096
    off, on = _pair("attn", s)
    saved_gib = off.prediction.memory.activations_gib - on.prediction.memory.activations_gib
    assert saved_gib == pytest.approx(LAYERS * 2 * (2 * s * H / TP) / GIB, rel=1e-9)


def test_copies_hidden_under_compute_cost_nothing():
    off, on = _pair("attn_qkv")
    assert on.prediction.step_time_s == off.prediction.step_time_s
    table = layer_table(MODEL, CLUSTER, _training(8192), ParallelConfig(**BASE, activation_offload="attn_qkv"))
    assert all(b.act_offload_wait_s == 0 for b in table.blocks)


def test_copies_beyond_compute_are_exposed_and_free_less():
    """A 1 GB/s host link: each direction takes copied / rate (rate: the link at its efficiency,
    below the GPU's DRAM share), beyond the block's forward and backward compute; only the
    fraction copied within the forward is freed."""
    gpu = replace(CLUSTER.gpu, host_link_gb_s=1.0)
    slow = replace(CLUSTER, gpu=gpu)
    rate = min(1e9 * gpu.link_efficiency, gpu.host_dram_gb_s * 1e9 * gpu.host_memory_efficiency / 8)
    s = 8192
    copied = 3 * (2 * s * H / TP) + 2 * (2 * s * G * D / TP)
    freed = 2 * (2 * s * H / TP) + 2 * (2 * s * G * D / TP)
    t = _training(s)
    plain = layer_table(MODEL, slow, t, ParallelConfig(**BASE)).blocks[0]
    block = layer_table(MODEL, slow, t, ParallelConfig(**BASE, activation_offload="attn")).blocks[0]
    fwd, bwd = plain.fwd_s, plain.compute_s - plain.fwd_s
    copy_s = copied / rate
    assert copy_s > bwd > fwd
    assert block.act_offload_wait_s == pytest.approx((copy_s - fwd) + (copy_s - bwd), rel=1e-9)
    assert block.fwd_s == pytest.approx(fwd + copy_s - fwd, rel=1e-9)
    assert plain.act.none - block.act.none == pytest.approx(freed * fwd / copy_s, rel=1e-9)
    off, on = _pair("attn", s, slow)
    m = 64  # micro-batches per step, one pipeline rank
    assert on.prediction.step_time_s - off.prediction.step_time_s == pytest.approx(
        m * LAYERS * block.act_offload_wait_s, rel=1e-6)


@pytest.mark.parametrize("change, word", [
    (dict(engine="torchtitan"), "torchtitan"),
    (dict(engine="deepspeed", tp=1, sequence_parallel=False), "deepspeed"),
    (dict(recompute="selective"), "recompute none"),
    (dict(recompute="full", recompute_layers=(80,)), "recompute none"),
])
def test_refused_where_not_priced(change, word):
    cfg = ParallelConfig(**{**BASE, **change, "activation_offload": "attn"})
    with pytest.raises(SpecError) as err:
        estimate(MODEL, CLUSTER, _training(8192), cfg)
    assert err.value.field == "parallelism.activation_offload" and word in str(err.value)
