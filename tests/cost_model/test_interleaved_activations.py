"""A rank's saved activations (stages.rank_cost) against a direct replay of its op order
(schedule_sim.rank_order: Megatron's interleaved 1F1B, megatron/core/pipeline_parallel/
schedules.py @d98e8a64ddf3), with each virtual stage's bytes summed from the layer table;
and, where every stage of a rank is held alike, against the uniform count
in_flight.in_flight_micro_batches x the rank's total (the pricing before per-chunk counts)."""

from __future__ import annotations

import pytest

from cost_model.pipeline import in_flight
from cost_model.pipeline.order import rank_order
from cost_model.pipeline.stages import rank_cost, slices_from_counts
from cost_model.specs.inputs import ParallelConfig
from cost_model.terms.layers import layer_table
from planner.request.parse import parse_cluster, parse_model, parse_training

# the README quickstart's plan: llama3-70b, 64 H100, dp2 tp4 pp4 cp2 vpp4, 64 micro-batches
QUICKSTART_COUNTS = [5] * 14 + [6, 4]


def _quickstart_table():
    model = parse_model({"name": "llama3-70b"})
    cluster = parse_cluster({"gpu": "h100-sxm", "num_gpus": 64})
    training = parse_training({"global_batch_size": 128, "seq_length": 8192})
    cfg = ParallelConfig(dp=2, tp=4, pp=4, cp=2, vpp=4, micro_batch_size=1, schedule="interleaved",
                         sequence_parallel=True, zero=1)
    return layer_table(model, cluster, training, cfg)


def _chunk_bytes(table, slices, rank: int, pp: int) -> list[float]:
    """Bytes one micro-batch leaves on each of the rank's chunks, from the layer table (no
    recompute): its blocks, the embedding on stage 0, the output layer on the last."""
    out = []
    for sl in slices:
        if sl.index % pp != rank:
            continue
        b = sum(table.blocks[i].act.none for i in range(sl.first, sl.last + 1))
        b += table.embedding.act.none if sl.index == 0 else 0.0
        b += table.output.act.none if sl.index == len(slices) - 1 else 0.0
        out.append(b)
    return out


def _replay_peak(pp: int, rank: int, m: int, vpp: int, chunk_bytes: list[float]) -> float:
    """Saved bytes after every op of the rank's order: a forward of chunk c saves
    chunk_bytes[c], its backward frees them."""
    live = peak = 0.0
    for kind, _, c in rank_order("interleaved", pp, rank, m, vpp):
        live += chunk_bytes[c] if kind == "F" else -chunk_bytes[c]
        peak = max(peak, live)
    return peak


def test_quickstart_plan_activations_equal_the_replayed_order():
    table = _quickstart_table()
    pp, vpp, m = 4, 4, 64
    slices = slices_from_counts(QUICKSTART_COUNTS, None)
    blocks_held, blocks_uniform = [], []
    for r in range(pp):
        rc = rank_cost(table, slices, r, pp, "none", "interleaved", m, vpp)
        chunks = _chunk_bytes(table, slices, r, pp)
        assert rc.activations_bytes == pytest.approx(_replay_peak(pp, r, m, vpp, chunks), rel=1e-12)
        counts = [QUICKSTART_COUNTS[c * pp + r] for c in range(vpp)]
        blocks_held.append(_replay_peak(pp, r, m, vpp, counts))
        blocks_uniform.append(in_flight.in_flight_micro_batches("interleaved", pp, r, m, vpp) * sum(counts))
    # block-micro-batches held at the peak: rank 2 (its last chunk, the least held, 6 blocks)
    # holds fewer than the uniform count 3.75 x 21, rank 3 (its last chunk 4 blocks) more
    # than 3.25 x 19 (+5%); the others hold equal chunks. In bytes rank 3 holds less than the
    # uniform count all the same: its last chunk also carries the fp32 logits.
    assert blocks_held == [95, 85, 78, 65]
    assert blocks_uniform == pytest.approx([95, 85, 78.75, 61.75])


@pytest.mark.parametrize("schedule,vpp", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 4)])
def test_equal_chunks_priced_as_the_uniform_count(schedule, vpp):
    """Every stage of the rank alike (or one stage per rank): the per-chunk pricing is the
    uniform count x the rank's total, as before."""
    table = _quickstart_table()
    pp, m = 4, 16
    S = pp * vpp
    slices = slices_from_counts([80 // S] * S, None)
    for r in range(pp):
        rc = rank_cost(table, slices, r, pp, "none", schedule, m, vpp)
        chunks = _chunk_bytes(table, slices, r, pp)
        uniform = in_flight.in_flight_micro_batches(schedule, pp, r, m, vpp) * sum(chunks)
        if vpp == 1 or len(set(chunks)) == 1:
            assert rc.activations_bytes == pytest.approx(uniform, rel=1e-12)
        if schedule == "interleaved":
            assert rc.activations_bytes == pytest.approx(_replay_peak(pp, r, m, vpp, chunks), rel=1e-12)


@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (4, 4, 64), (8, 8, 32), (4, 3, 12), (8, 4, 16)])
def test_memory_rows_keep_the_peak(pp, vpp, m):
    """The ILP's rows (in_flight.memory_row_vectors: segment-covered vectors dropped) give the
    same maximum as every Pareto vector, for random nonnegative chunk bytes."""
    import random

    rng = random.Random(pp * 100 + vpp * 10 + m)
    for r in range(pp):
        full = in_flight.live_chunk_vectors("interleaved", pp, r, m, vpp)
        rows = in_flight.memory_row_vectors("interleaved", pp, r, m, vpp)
        assert set(rows) <= set(full)
        for _ in range(200):
            a = [rng.random() ** 3 for _ in range(vpp)]
            peak = max(sum(n * x for n, x in zip(v, a, strict=True)) for v in full)
            assert max(sum(n * x for n, x in zip(v, a, strict=True)) for v in rows) == pytest.approx(peak, rel=1e-12)
