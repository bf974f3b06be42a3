"""Layer-level activation offload (parallelism.cpu_offload_layers, terms/layer_offload.py)
against hand formulas: an offloaded block's copies are its Korthikanti et al. 2022 §4.1 saved
tensors (Table 2's 34sbh for a GPT block, less the two dropout masks without dropout, the
5as^2b core gone under FlashAttention; generalised: GQA keys and values 2sb(gd)/t each,
SwiGLU's fc1 output 2sb(2f)/t and fc2's input 2sbf/t), only tensors of at least 2**20
elements (Transformer Engine's cpu_offload.py); the copies' wait is checked against a
brute-force run of the engine's serial offload stream; megatron-core 0.16.1's rules refuse
what it refuses."""

from __future__ import annotations

import dataclasses

import pytest

from cost_model.estimate import estimate
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.results import GIB
from cost_model.terms.act_offload import host_path_b_s
from cost_model.terms.activations import block_activation_bytes
from cost_model.terms.layer_offload import (
    dense_block_saved_tensors,
    kept_extra_bytes,
    offload_wait_s,
)
from cost_model.terms.layers import layer_table
from planner.request.parse import parse_cluster, parse_model, parse_training

MODEL = parse_model("llama3-70b")
H, A, G, D, F, LAYERS = 8192, 64, 8, 128, 28672, 80  # Llama 3 70B (Meta's config.json)
TP, S = 8, 8192
CLUSTER = parse_cluster({"gpu": "h100-sxm", "num_gpus": 8})
TRAINING = parse_training({"global_batch_size": 64, "seq_length": S})
BASE = dict(tp=TP, pp=1, dp=1, zero=1, sequence_parallel=True, recompute="none")
# one block, one micro-batch of one sequence, bf16, t = 8 with SP (every tensor split by t):
# two norm inputs, the QKV and fc1 inputs, q and the attention output 2sh/t each; k, v 2s(gd)/t
# each (exactly 2**20 elements: offloaded); SwiGLU fc1's output 2s(2f)/t, fc2's input 2sf/t
COPIED = 2 * S / TP * (6 * H + 2 * G * D + 3 * F)
KEPT = 4 * S * A / TP  # FlashAttention's fp32 logsumexp per head and token: s*a/t < 2**20 elements


def _est(n: int, **kw):
    return estimate(MODEL, CLUSTER, TRAINING, ParallelConfig(**BASE, cpu_offload_layers=n, **kw))


def test_model_is_the_one_the_references_describe():
    assert (MODEL.hidden_size, MODEL.num_attention_heads, MODEL.num_kv_heads, MODEL.kv_channels,
            MODEL.ffn_hidden_size, MODEL.num_layers, MODEL.dropout) == (H, A, G, D, F, LAYERS, False)


@pytest.mark.parametrize("dtype, sp, dropout", [("bf16", True, False), ("fp8", True, False), ("bf16", False, True),
                                               ("fp8", False, True)])
def test_the_itemised_tensors_are_the_whole_block(dtype, sp, dropout):
    """Nothing of the block is left out of the itemised tensors: with the kept extras they sum
    to block_activation_bytes (so no saved byte escapes the offload's accounting), in 16-bit
    and fp8 (the GEMM inputs' FP8 copies), with and without SP and dropout masks."""
    model = dataclasses.replace(MODEL, dropout=dropout)
    t = parse_training({"global_batch_size": 64, "seq_length": S, "dtype": dtype})
    cfg = ParallelConfig(**{**BASE, "sequence_parallel": sp})
    items = dense_block_saved_tensors(model, t, cfg)
    total = sum(x.nbytes for x in items.values()) + kept_extra_bytes(model, t, cfg)
    ref = block_activation_bytes(model, t, 1, TP, 1, sp, False, cfg.engine).none
    assert total == pytest.approx(ref, rel=1e-12)
    if (dtype, sp, dropout) == ("bf16", True, False):
        assert sum(x.nbytes for x in items.values()) == pytest.approx(COPIED, rel=1e-12)


@pytest.mark.parametrize("n", [1, 20, 79])
def test_offloaded_blocks_leave_the_gpu_and_fill_the_host(n):
    """N blocks' copies leave the GPU (the engine's (L-N)-block peak); the host holds them for
    the one micro-batch in flight (pp 1), for each of the node's 8 GPUs."""
    off, on = _est(0), _est(n)
    saved_gib = off.prediction.memory.activations_gib - on.prediction.memory.activations_gib
    assert saved_gib == pytest.approx(n * COPIED / GIB, rel=1e-9)
    assert off.prediction.memory.host_gib == 0
    assert on.prediction.memory.host_gib == pytest.approx(8 * n * COPIED / GIB, rel=1e-9)


def test_the_offloaded_blocks_are_the_first_n():
    """Transformer Engine offloads layers 0..N-1 (cpu_offload.py _default_offload_sync_init)."""
    table = layer_table(MODEL, CLUSTER, TRAINING, ParallelConfig(**BASE, cpu_offload_layers=3))
    assert [b.act_host_bytes > 0 for b in table.blocks[:4]] == [True, True, True, False]
    assert table.blocks[0].act.none == pytest.approx(KEPT, rel=1e-12)
    assert table.blocks[3].act.none == pytest.approx(COPIED + KEPT, rel=1e-12)


def _brute_wait_s(copy_s: float, compute_s: float, n: int, layers: int) -> float:
    """The engine's schedule run layer by layer: block i's copy starts on the one side stream
    when its forward ends and the stream is free; the forward of block L-N+i waits for it."""
    t, stream, wait, done = 0.0, 0.0, 0.0, {}
    for k in range(layers):
        i = k - (layers - n)
        if i >= 0:  # forward of layer L-N+i waits for block i's copy
            wait += max(0.0, done[i] - t)
            t = max(t, done[i])
        t += compute_s
        if k < n:
            stream = max(stream, t) + copy_s
            done[k] = stream
    return wait


@pytest.mark.parametrize("copy_s, compute_s, n, layers", [
    (1.0, 2.0, 20, 80), (3.0, 1.0, 20, 80), (3.0, 1.0, 79, 80), (1.0, 1.0, 1, 2), (5.0, 1.0, 10, 12),
    (0.5, 1.0, 79, 80), (2.5, 1.0, 40, 80)])
def test_the_wait_is_the_serial_streams(copy_s, compute_s, n, layers):
    assert offload_wait_s(copy_s, compute_s, n, layers) == pytest.approx(
        _brute_wait_s(copy_s, compute_s, n, layers), abs=1e-12)


def test_the_step_pays_only_the_wait():
    """N = L-1 leaves no compute window: every copy, each way, delays the next block by
    c = the block's copies over the GPU's host path; the step grows by that for each of the
    64 micro-batches (one sequence each on the one data-parallel rank). N = 20 of 80 blocks
    leaves 78 blocks' compute to hide 20 copies: nothing exposed on an H100."""
    c = COPIED / host_path_b_s(CLUSTER)
    off, on = _est(0), _est(79)
    assert on.prediction.step_time_s - off.prediction.step_time_s == pytest.approx(64 * 2 * 79 * c, rel=1e-6)
    assert _est(20).prediction.step_time_s == pytest.approx(off.prediction.step_time_s, rel=1e-12)


@pytest.mark.parametrize("change, word", [
    (dict(pp=2), "pipeline"), (dict(recompute="full"), "recomputation"), (dict(cpu_offload_layers=80), "[0, 80)"),
    (dict(activation_offload="attn"), "fine_grained_activation_offloading"), (dict(engine="torchtitan"), "torchtitan"),
])
def test_refused_with_the_engines_rule(change, word):
    kw = {**BASE, "cpu_offload_layers": 20, **change}
    with pytest.raises(SpecError) as err:
        estimate(MODEL, CLUSTER, TRAINING, ParallelConfig(**kw))
    assert err.value.field == "parallelism.cpu_offload_layers"
    assert word in err.value.message


def test_moe_models_are_refused():
    with pytest.raises(SpecError, match="dense blocks"):
        estimate(parse_model("mixtral-8x7b"), CLUSTER, TRAINING, ParallelConfig(**BASE, cpu_offload_layers=4))


def test_small_tensors_stay_on_the_gpu():
    """s = 1024, t = 8 with SP: k and v hold s(gd)/t = 131072 elements each, under 2**20, and
    stay on the GPU with the logsumexp; q and the h- and f-wide tensors (2**20 and more) go."""
    s = 1024
    t = parse_training({"global_batch_size": 64, "seq_length": s})
    table = layer_table(MODEL, CLUSTER, t, ParallelConfig(**BASE, cpu_offload_layers=1))
    kv = 2 * (2 * s * G * D / TP)
    assert table.blocks[0].act.none == pytest.approx(kv + 4 * s * A / TP, rel=1e-12)
    assert table.blocks[0].act_host_bytes == pytest.approx(2 * s / TP * (6 * H + 3 * F), rel=1e-12)
