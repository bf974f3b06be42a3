"""Stages with no transformer block: a layout that counts the embedding and the loss as
pipeline layers (pp x vpp up to blocks + 2; Megatron's --account-for-embedding/loss-in-
pipeline-split, torchtitan's default split) leaves the first stage only the embedding and the
last only the loss. The estimate takes it as stage_layers with 0 where the engine builds it,
and prices such a stage as what it holds."""

from __future__ import annotations

import math

import pytest

from cost_model.engines.support import empty_chunks_rule
from cost_model.estimate import estimate
from cost_model.hardware.catalog import get_gpu
from cost_model.model.presets import get_preset
from cost_model.pipeline.stages import rank_cost, slices_from_counts
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec
from cost_model.terms.layers import layer_table

BLOCKS = 32  # llama3-8b
EMPTY_ENDS = (0,) + (1,) * BLOCKS + (0,)  # pp 2 x vpp 17 = 34 stages


def _cluster(n: int = 8) -> ClusterSpec:
    g = get_gpu("h100-sxm")
    return ClusterSpec(g, n, 8, g.nvlink_gb_s, g.network_gb_s, g.intra_node_latency_s, g.inter_node_latency_s)


def _cfg(counts, vpp: int, engine: str = "megatron") -> ParallelConfig:
    return ParallelConfig(dp=4, pp=2, vpp=vpp, micro_batch_size=1, zero=1, schedule="interleaved",
                          stage_layers=tuple(counts), engine=engine)


def _estimate(counts, vpp: int, engine: str = "megatron"):
    return estimate(get_preset("llama3-8b"), _cluster(), TrainingSpec(64, 4096), _cfg(counts, vpp, engine))


@pytest.mark.parametrize(
    "engine,counts,ok",
    [
        ("megatron", EMPTY_ENDS, True),
        ("megatron", (1,) * 16 + (0, 0) + (1,) * 16, True),  # its layout takes an empty stage anywhere
        ("torchtitan", EMPTY_ENDS, True),
        ("torchtitan", (1,) * 16 + (0, 0) + (1,) * 16, False),  # its split gives a middle stage a block
        ("deepspeed", EMPTY_ENDS, False),
        ("runtime", EMPTY_ENDS, True),  # train._build_part: a part of the embedding, or of the head, alone
        ("runtime", (1,) * 16 + (0, 0) + (1,) * 16, False),
        ("deepspeed", (1,) * 32, True),
    ],
)
def test_engine_rule_on_stages_without_a_block(engine, counts, ok):
    rule = empty_chunks_rule(engine, counts)
    assert (rule is None) == ok, rule
    if not ok:
        empty = [k for k, n in enumerate(counts) if n == 0]
        assert str(empty) in rule and ".py" in rule  # the stages, and the engine file it was read from


def test_estimate_refuses_what_the_engine_cannot_build():
    with pytest.raises(SpecError) as info:
        _estimate(EMPTY_ENDS, 17, "deepspeed")
    assert info.value.field == "parallelism.stage_layers"


def test_more_stages_than_blocks_default_to_empty_ends():
    """pp x vpp = blocks + 2 without stage_layers: the balanced split is the layout that counts
    the embedding and the loss as pipeline layers (what Megatron's --account-for-embedding/
    loss-in-pipeline-split build), priced as given explicitly; an engine that builds no empty
    stage refuses it with its rule."""
    def no_counts(engine):
        return estimate(get_preset("llama3-8b"), _cluster(), TrainingSpec(64, 4096),
                        ParallelConfig(dp=4, pp=2, vpp=17, micro_batch_size=1, zero=1, schedule="interleaved",
                                       engine=engine))

    for engine in ("megatron", "torchtitan", "runtime"):
        implicit, explicit = no_counts(engine), _estimate(EMPTY_ENDS, 17, engine)
        assert [s.layers for s in implicit.stages] == [s.layers for s in explicit.stages]
        assert implicit.prediction.step_time_s == explicit.prediction.step_time_s
    # 3 more stages than blocks: the balanced split leaves a middle stage empty too, which
    # Megatron's layout takes and torchtitan's split does not
    def thirty_five(engine):
        return estimate(get_preset("llama3-8b"), _cluster(), TrainingSpec(60, 4096),
                        ParallelConfig(dp=1, pp=5, vpp=7, micro_batch_size=1, schedule="interleaved", engine=engine))

    assert [s.layers[1] - s.layers[0] + 1 for s in thirty_five("megatron").stages] == [0] + [1] * 32 + [0, 0]
    with pytest.raises(SpecError) as info:
        thirty_five("torchtitan")
    assert info.value.field == "parallelism.pp" and "torchtitan" in info.value.message


def test_empty_end_stages_hold_only_the_embedding_and_the_loss():
    """The first stage's time is the embedding's plus its one send, the last's the output
    layer's plus its one receive; rank 0 keeps the embedding's and its 16 blocks' weights; the
    stages report no block (last = first - 1)."""
    est = _estimate(EMPTY_ENDS, 17)
    table = layer_table(get_preset("llama3-8b"), _cluster(), TrainingSpec(64, 4096), _cfg(EMPTY_ENDS, 17))
    first, last = est.stages[0], est.stages[-1]
    assert first.layers == (0, -1) and last.layers == (BLOCKS, BLOCKS - 1)
    assert math.isclose(first.time_ms * 1e-3, table.embedding.time_s + table.p2p_s, rel_tol=1e-9)
    assert math.isclose(last.time_ms * 1e-3, table.output.time_s + table.p2p_s, rel_tol=1e-9)
    slices = slices_from_counts(EMPTY_ENDS, None)
    rank0 = rank_cost(table, slices, 0, 2, "none", "interleaved", est.num_micro_batches, 17)
    blocks0 = [sl.first for sl in slices if sl.index % 2 == 0 and sl.last >= sl.first]
    assert len(blocks0) == 16
    want = table.embedding.weights_bytes + sum(table.blocks[i].weights_bytes for i in blocks0)
    assert math.isclose(rank0.weights_bytes, want, rel_tol=1e-12)


def test_empty_end_stages_conserve_the_work():
    """The same blocks, embedding and loss over the same two ranks: the layout with empty end
    stages does, per micro-batch and summed over the ranks, the compute of the balanced pp 2 x
    vpp 16 layout, and keeps the same weights."""
    table = layer_table(get_preset("llama3-8b"), _cluster(), TrainingSpec(64, 4096), _cfg(EMPTY_ENDS, 17))

    def totals(counts, vpp):
        ranks = [rank_cost(table, slices_from_counts(counts, None), r, 2, "none", "interleaved", 8, vpp) for r in (0, 1)]
        return sum(r.compute_s for r in ranks), sum(r.weights_bytes for r in ranks)

    empty_c, empty_w = totals(EMPTY_ENDS, 17)
    even_c, even_w = totals((1,) * BLOCKS, 16)
    assert math.isclose(empty_c, even_c, rel_tol=1e-12) and math.isclose(empty_w, even_w, rel_tol=1e-12)
