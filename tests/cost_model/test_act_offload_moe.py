"""The MoE activation offload levels' price against hand-computed bytes (terms/act_offload.py,
engines/offload.py): in an MoE block expert_fc1 copies and frees the grouped fc1's permuted
input (s*b*top_k routed token copies x h, 16-bit) and moe_act fc1's output (x 2f under SwiGLU),
Megatron-Core 0.16.1 transformer/moe/experts.py TEGroupedMLP.forward; a tensor under 1024*1024
elements stays on the GPU; dense blocks offload nothing under `moe`; a dense model, fp8 and a
clamped GLU are refused naming parallelism.activation_offload."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_model.estimate import estimate
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.results import GIB
from cost_model.terms.act_offload import block_act_offload
from cost_model.terms.layers import layer_table
from planner.request.parse import parse_cluster, parse_model, parse_training

H, E, K, F, LAYERS = 2048, 8, 2, 1024, 4
MODEL = parse_model({"transformer": {
    "num_layers": LAYERS, "hidden_size": H, "num_attention_heads": 16, "num_kv_heads": 8, "ffn_hidden_size": 5504,
    "vocab_size": 32000, "mlp": "swiglu",
    "moe": {"num_experts": E, "top_k": K, "ffn_hidden_size": F, "layer_freq": 2}}})  # blocks 0 and 2 are MoE
CLUSTER = parse_cluster({"gpu": "h100-sxm", "num_gpus": 8})
# a host path far faster than the copies, so every block drains its copies within its forward
# (the small blocks here compute for less than an H100's link takes; test_slow_link_frees_less)
FAST = replace(CLUSTER, gpu=replace(CLUSTER.gpu, host_link_gb_s=1e6, host_dram_gb_s=1e8))
BASE = dict(tp=1, pp=1, dp=8, ep=1, zero=1, sequence_parallel=False, recompute="none")


def _training(seq: int, **extra):
    return parse_training({"global_batch_size": 64, "seq_length": seq, **extra})


def _expert_bytes(seq: int, load: float = 1.0) -> tuple[float, float]:
    """(fc1 input, fc1 output) bytes of one MoE block, b = 1, tp = 1: 16-bit, s*K*load copies."""
    tokens = seq * K * load
    return 2 * tokens * H, 2 * tokens * 2 * F


def _blocks(level: str, seq: int, cluster=FAST, **extra):
    t = _training(seq, **extra)
    return (layer_table(MODEL, cluster, t, ParallelConfig(**BASE)).blocks,
            layer_table(MODEL, cluster, t, ParallelConfig(**BASE, activation_offload=level)).blocks)


def test_moe_frees_the_expert_inputs_of_moe_blocks_only():
    """s = 4096: 8192 routed copies; fc1 input 8192 x 2048, fc1 output 8192 x 2048 (2f) elements,
    2 bytes each; the dense blocks 1 and 3 keep everything."""
    seq = 4096
    fc1_in, fc1_out = _expert_bytes(seq)
    plain, off = _blocks("moe", seq)
    freed = [p.act.none - o.act.none for p, o in zip(plain, off, strict=True)]
    assert freed == pytest.approx([fc1_in + fc1_out, 0, fc1_in + fc1_out, 0], rel=1e-9)
    assert [o.act_host_bytes for o in off] == pytest.approx([fc1_in + fc1_out, 0, fc1_in + fc1_out, 0], rel=1e-9)
    # two blocks' freed bytes held again at the backward (the block in backward, the one reloading)
    assert off[0].transient_bytes - plain[0].transient_bytes == pytest.approx(2 * (fc1_in + fc1_out), rel=1e-9)


def test_attn_moe_adds_the_attention_tensors():
    """attn_moe = attn + moe in an MoE block: q, k, v and the core's output (h = a d = 2048,
    g d = 1024 wide, 2 bytes) freed; the output copied twice (core_attn and attn_proj)."""
    seq = 4096
    fc1_in, fc1_out = _expert_bytes(seq)
    q = out = 2 * seq * H
    k = v = 2 * seq * 1024
    plain, off = _blocks("attn_moe", seq)
    assert plain[0].act.none - off[0].act.none == pytest.approx(q + k + v + out + fc1_in + fc1_out, rel=1e-9)
    assert off[0].act_host_bytes == pytest.approx(q + k + v + 2 * out + fc1_in + fc1_out, rel=1e-9)
    assert plain[1].act.none - off[1].act.none == pytest.approx(q + k + v + out, rel=1e-9)


def test_the_busiest_rank_offloads_its_load():
    """A stated routing imbalance of 1.5 (training.moe_imbalance) scales the routed copies."""
    seq = 4096
    fc1_in, fc1_out = _expert_bytes(seq, 1.5)
    plain, off = _blocks("moe", seq, moe_imbalance=1.5)
    assert plain[0].act.none - off[0].act.none == pytest.approx(fc1_in + fc1_out, rel=1e-9)


@pytest.mark.parametrize("seq, moved", [(256, True), (128, False)])
def test_expert_tensors_under_the_threshold_stay(seq, moved):
    """s = 256: 512 copies x 2048 = 1024*1024 elements each, offloaded (>= the threshold);
    s = 128: 524288 elements, under Megatron's min_offloaded_tensor_size: nothing moves."""
    fc1_in, fc1_out = _expert_bytes(seq)
    plain, off = _blocks("moe", seq)
    assert plain[0].act.none - off[0].act.none == pytest.approx((fc1_in + fc1_out) if moved else 0.0, rel=1e-9)


def test_host_memory_is_every_gpus_copies():
    seq = 4096
    fc1_in, fc1_out = _expert_bytes(seq)
    t = _training(seq)
    on = estimate(MODEL, FAST, t, ParallelConfig(**BASE, activation_offload="moe"))
    # one micro-batch in flight (pp 1), two MoE blocks, 8 GPUs on the node
    assert on.prediction.memory.host_gib == pytest.approx(8 * 2 * (fc1_in + fc1_out) / GIB, rel=1e-9)


def test_slow_link_frees_less_and_exposes_the_rest():
    """On the H100's own host path, with a block computing 1 ms forward and 2 ms backward: each
    direction takes copied / rate; what is beyond the forward and the backward compute is
    exposed, and only the fraction copied within the forward is freed."""
    gpu = CLUSTER.gpu
    rate = min(gpu.host_link_gb_s * 1e9 * gpu.link_efficiency, gpu.host_dram_gb_s * 1e9 * gpu.host_memory_efficiency / 8)
    seq, fwd, bwd = 8192, 1e-3, 2e-3
    fc1_in, fc1_out = _expert_bytes(seq)
    cfg = ParallelConfig(**BASE, activation_offload="moe")
    off = block_act_offload(MODEL, CLUSTER, _training(seq), cfg, fwd, bwd, moe_layer=True)
    copy_s = (fc1_in + fc1_out) / rate
    assert copy_s > bwd > fwd
    assert (off.fwd_exposed_s, off.bwd_exposed_s) == pytest.approx((copy_s - fwd, copy_s - bwd), rel=1e-9)
    assert off.saved_bytes == pytest.approx((fc1_in + fc1_out) * fwd / copy_s, rel=1e-9)
    assert block_act_offload(MODEL, CLUSTER, _training(seq), cfg, fwd, bwd, moe_layer=False).copied_bytes == 0


DENSE = parse_model("llama3-8b")


@pytest.mark.parametrize("model, extra, word", [
    (DENSE, {}, "model.moe"),
    (MODEL, {"dtype": "fp8"}, "16-bit"),
])
@pytest.mark.parametrize("level", ["moe", "attn_moe"])
def test_refused_where_not_priced(model, extra, word, level):
    cfg = ParallelConfig(**{**BASE, "activation_offload": level})
    with pytest.raises(SpecError) as err:
        estimate(model, CLUSTER, _training(4096, **extra), cfg)
    assert err.value.field == "parallelism.activation_offload" and word in str(err.value)
