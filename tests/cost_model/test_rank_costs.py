"""cost_model.pipeline.rank_costs' coefficients rebuild stages.rank_cost exactly (the formulas of the
module docstring), and the one memory rule and its inverse agree."""

from __future__ import annotations

import itertools

import pytest

from cost_model.engines.states import grad_dtype_bytes
from cost_model.pipeline.rank_costs import StageProblem, capacity_bytes
from cost_model.pipeline.stages import slices_from_counts
from cost_model.specs.inputs import ParallelConfig
from cost_model.terms import memory
from cost_model.terms.activations import activation_dtype_bytes
from cost_model.terms.layers import layer_table
from cost_model.terms.overlap import overlap_hidden_s, overlap_window_s, overlapped_s
from planner.request.parse import parse_cluster, parse_model, parse_training

MODEL = {"transformer": {"num_layers": 6, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
                         "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu",
                         "moe": {"num_experts": 4, "top_k": 2, "ffn_hidden_size": 2048, "layer_freq": 2}}}


@pytest.mark.parametrize("recompute,schedule,pp,vpp,zero", [
    ("full", "1f1b", 2, 1, 1), ("selective", "interleaved", 2, 2, 0), ("none", "gpipe", 3, 1, 3),
])
def test_coefficients_rebuild_rank_cost(recompute, schedule, pp, vpp, zero):
    model, cluster = parse_model(MODEL), parse_cluster({"gpu": "a100-80gb", "num_gpus": 8 * pp})
    training = parse_training({"global_batch_size": 32, "seq_length": 2048, "attention": "eager"})
    cfg = ParallelConfig(dp=4, tp=2, pp=pp, vpp=vpp, zero=zero, ep=2, micro_batch_size=1)
    table = layer_table(model, cluster, training, cfg)
    assert len(table.block_kinds) == 2  # dense and MoE blocks
    g = cluster.gpu.overlap_interference
    p = StageProblem(table, pp, vpp, schedule, recompute, 8, capacity_bytes(80, 0.1), 2**30, g)
    S = p.num_stages
    counts = [1] * S
    counts[0] += 6 - S
    for rcs in itertools.product(*[range(n + 1) if p.full else [0] for n in counts]):
        slices = slices_from_counts(counts, rcs)
        for r in range(pp):
            rc, ex = p.rank_cost(slices, r), p.extras[r]
            mine = [i for sl in slices if sl.index % pp == r for i in range(sl.first, sl.last + 1)]
            redo = [i for sl in slices if sl.index % pp == r for i in range(sl.first, sl.first + sl.recompute_layers)]
            co = p.block_coefficients
            time = sum(co[i].time_s for i in mine) + sum(co[i].recompute_full_s for i in redo) + ex.time_s
            assert time == pytest.approx(rc.time_s, rel=1e-12)
            dp = sum(co[i].dp_sync_s for i in mine) + ex.dp_sync_s
            window = sum(co[i].dp_window_s for i in mine) + ex.dp_window_s
            hidden = sum(co[i].dp_hidden_s for i in mine) + ex.dp_hidden_s
            assert max(dp - window, hidden) == pytest.approx(rc.exposed_dp_s, rel=1e-12, abs=1e-15)
            # per chunk of the rank: its blocks' activations less what full recompute saves,
            # plus the embedding / output layer's; held per in_flight.live_chunk_vectors
            chunk = [sum(co[i].act_bytes for i in range(sl.first, sl.last + 1))
                     - sum(co[i].act_saved_bytes for i in range(sl.first, sl.first + sl.recompute_layers))
                     + p.stage_extras[sl.index].act_bytes
                     for sl in slices if sl.index % pp == r]
            held = max(sum(n * a for n, a in zip(v, chunk, strict=True)) for v in p.live_chunks(r))
            alloc = sum(co[i].state_bytes for i in mine) + ex.state_bytes + held
            assert alloc == pytest.approx(rc.allocated_bytes, rel=1e-12)
            if vpp == 1:  # one vector: the uniform count of the rank's whole activations
                f = p.inflight(r)
                assert held == pytest.approx(f * (sum(co[i].act_bytes for i in mine) + ex.act_bytes
                                                  - sum(co[i].act_saved_bytes for i in redo)), rel=1e-12)
            assert memory.peak_bytes(alloc, rc.transient_bytes, 2**30) == pytest.approx(rc.peak_bytes, rel=1e-12)


@pytest.mark.parametrize("comm,compute,g", [(1.0, 3.0, 0.2), (3.0, 1.0, 0.2), (2.0, 2.0, 0.0), (0.5, 0.0, 0.3)])
def test_overlap_rule_equals_its_linear_pieces(comm, compute, g):
    pieces = max(comm - overlap_window_s(compute, g), overlap_hidden_s(comm, g))
    assert overlapped_s(comm, compute, g) == pytest.approx(pieces, rel=1e-12)


def test_allocatable_is_the_inverse_of_peak():
    cap, reserved = 80 * 2**30, 3 * 2**30
    budget = memory.allocatable_bytes(cap, reserved)
    assert memory.peak_bytes(budget, 0.0, reserved) == pytest.approx(cap, rel=1e-12)
    assert memory.peak_bytes(budget / 2, budget / 2, reserved) == pytest.approx(cap, rel=1e-12)


@pytest.mark.parametrize("dtype,grad_dtype,act,grad", [
    ("fp8", "fp32", 2, 4),  # fp8 GEMMs, bf16 activations (Transformer Engine)
    ("bf16", "bf16", 2, 2),
    ("fp32", "bf16", 4, 4),  # fp32 training: fp32 gradients whatever grad_dtype says
    ("fp16", "fp32", 2, 4),
])
def test_dtype_rules(dtype, grad_dtype, act, grad):
    t = parse_training({"global_batch_size": 8, "seq_length": 128, "dtype": dtype, "grad_dtype": grad_dtype})
    assert activation_dtype_bytes(t) == act
    assert grad_dtype_bytes(t) == grad
