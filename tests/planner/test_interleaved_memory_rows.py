"""Interleaved memory rows: the ILP holds every rank to in_flight.peak_in_flight_bytes (one row
per vector of Megatron's order, ilp._memory_rows), not to the uniform count x the rank's
total. Checked against the brute force (exhaustive.best_partition, which prices partitions
with stages.rank_cost) at a capacity where the uniform count would admit a partition that
the true count rules out."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from cost_model.pipeline.stages import slices_from_counts, step_time_s
from cost_model.terms import memory
from planner import exhaustive
from planner.ilp import solve
from planner.search import LayerTables, stage_problem
from planner.service import problem_from_request
from planner.space import enumerate_candidates

from ._models import layers_model

REL = 1e-5


def _transformer(L: int) -> dict:
    # a small vocabulary: the last chunk's logits do not outweigh the blocks of the other chunks
    return {"transformer": {"num_layers": L, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
                            "ffn_hidden_size": 5504, "vocab_size": 2048, "mlp": "swiglu"}}


def _uniform_count_peak(p, slices, r) -> float:
    """The former pricing: in_flight_micro_batches x the rank's total activations (its chunks'
    bytes summed from the layer table: blocks, embedding / output layer)."""
    rc = p.rank_cost(slices, r)
    total = sum(p.block_coefficients[i].act_bytes for sl in slices if sl.index % p.pp == r
                for i in range(sl.first, sl.last + 1)) + p.extras[r].act_bytes
    allocated = rc.allocated_bytes - rc.activations_bytes + p.inflight(r) * total
    return memory.peak_bytes(allocated, rc.transient_bytes, rc.reserved_bytes)


def _compositions(L: int, S: int):
    for cuts in itertools.combinations(range(1, L), S - 1):
        b = (0, *cuts, L)
        yield [b[i + 1] - b[i] for i in range(S)]


@pytest.mark.parametrize(("model", "seq"), [(_transformer(12), 4096), (layers_model(8), 2048)])
def test_ilp_rejects_what_only_the_uniform_count_admits(model, seq):
    req = {"model": model, "cluster": {"gpu": "a100-80gb", "num_gpus": 4},
           "training": {"global_batch_size": 16, "seq_length": seq},
           "search": {"engine": "runtime", "schedule": "interleaved", "vpp": 2, "pp": 2, "recompute": "none",
                      "tp": 1}}
    prob = problem_from_request(req)
    tables = LayerTables(prob)
    checked = 0
    for c in enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile):
        if checked >= 1:
            break
        p = stage_problem(prob, c, tables.get(c))
        # the fastest partition that the uniform count prices below its true peak
        ranked = []
        for counts in _compositions(p.num_layers, p.num_stages):
            slices = slices_from_counts(counts, [0] * p.num_stages)
            ranks = [p.rank_cost(slices, r) for r in range(p.pp)]
            true = max(r.peak_bytes for r in ranks)
            old = max(_uniform_count_peak(p, slices, r) for r in range(p.pp))
            ranked.append((step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule), counts, true, old))
        ranked.sort(key=lambda x: x[0])
        # a capacity at which the uniform count's optimum (the fastest partition it admits)
        # does not fit under Megatron's order
        case = None
        for _, _, true, old in ranked:
            if old < true * (1 - 1e-3):
                cap = (true + old) / 2
                first = next(x for x in ranked if x[3] <= cap)
                if first[2] > cap:
                    case = cap, first[1]
                    break
        if case is None:
            continue
        cap, counts = case
        q = replace(p, capacity_bytes=cap)
        ref = exhaustive.best_partition(q)
        if ref is None:
            continue
        sol = solve(q, 30.0, None)
        assert sol.status == "optimal"
        assert list(sol.stage_layers) != counts
        slices = slices_from_counts(list(sol.stage_layers), list(sol.recompute_layers))
        ranks = [q.rank_cost(slices, r) for r in range(q.pp)]
        assert all(r.peak_bytes <= cap for r in ranks)
        got = step_time_s(ranks, q.num_micro_batches, q.vpp, q.schedule)
        assert math.isclose(got, ref[0], rel_tol=REL), (c, sol.stage_layers, ref)
        checked += 1
    assert checked == 1
