"""The DeepEP MoE dispatcher (ParallelConfig.moe_dispatcher "deepep"): its de-duplicated
traffic against a simulated router, its buffer against DeepEP's size formulas by hand, its
rules, and what a plan with it costs and holds."""

from __future__ import annotations

import copy
import random

import pytest

from cost_model.hardware.catalog import get_gpu
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ClusterSpec, ParallelConfig
from cost_model.terms import moe
from cost_model.validate import dispatcher_error
from planner.service import estimate


def _simulated_bins(num_experts, top_k, bin_experts, num_groups, group_top_k, tokens=4000, seed=7):
    """Distinct bins per token of a simulated balanced router: `group_top_k` uniformly chosen
    groups, one expert drawn in each (a group is chosen for its best experts), the rest of the
    top-k drawn uniformly from the chosen groups' other experts; counted directly."""
    rng = random.Random(seed)
    groups, g = (num_groups, group_top_k) if num_groups > 1 else (1, 1)
    size = num_experts // groups
    total = 0
    for _ in range(tokens):
        chosen = rng.sample(range(groups), g)
        firsts = [grp * size + rng.randrange(size) for grp in chosen] if groups > 1 else []
        pool = [grp * size + i for grp in chosen for i in range(size) if grp * size + i not in firsts]
        experts = firsts + rng.sample(pool, top_k - len(firsts))
        total += len({x // bin_experts for x in experts})
    return total / tokens


@pytest.mark.parametrize("experts,k,bin_,groups,gk", [
    (256, 8, 4, 8, 4),     # DeepSeek-V3 EP64: ranks of 4 experts, 8 node-groups, 4 per token
    (256, 8, 32, 8, 4),    # ... its nodes (8 ranks x 4 experts = one group)
    (256, 8, 64, 8, 4),    # nodes holding two groups each (EP32 over 4 nodes)
    (128, 8, 16, 0, 0),    # Qwen3-235B EP8: no groups
    (8, 2, 1, 0, 0),       # Mixtral EP8
    (384, 8, 12, 1, 1),    # Kimi-K2 EP32 (n_group 1)
])
def test_distinct_bins_match_a_simulated_router(experts, k, bin_, groups, gk):
    got = moe.expected_distinct_bins(experts, k, bin_, groups, gk)
    ref = _simulated_bins(experts, k, bin_, groups, gk)
    assert got == pytest.approx(ref, rel=0.03)
    assert got <= k + 1e-9


def test_node_limited_routing_bounds_the_nodes_a_token_reaches():
    """DeepSeek-V3 §2.1.2: at most 4 nodes per token; with its 8 groups on 8 nodes a token
    reaches its 4 selected nodes, against 5.3 of the 8 under unlimited routing."""
    limited = moe.expected_distinct_bins(256, 8, 32, 8, 4)
    free = moe.expected_distinct_bins(256, 8, 32)
    assert limited == pytest.approx(4.0) and free > 5.0


def test_buffer_bytes_follow_deepeps_size_hints_by_hand():
    """DeepEP @dd758ca csrc/legacy/config.hpp for 64 ranks (8 nodes), hidden 7168 bf16, 20 SMs
    (10 channels): dispatch config (nvl recv 288, rdma recv 128) is the larger of the two."""
    from cost_model.model.presets import get_preset

    m = get_preset("deepseek-v3")
    hidden = 7168 * 2
    ch, nvl_ranks, rdma_ranks = 10, 8, 8
    nvl = ch * nvl_ranks * (2 * rdma_ranks + 3) * 4 + ch * nvl_ranks * 288 * (hidden + 8 + 128 * 8 + 128 * 4 + 128 * 4)
    rdma = (ch * rdma_ranks * (8 * 2 + 2) * 2 * 4
            + ch * rdma_ranks * 128 * (hidden * 2 + 8 * 2 + 128 * 8 * 2 + 128 * 4 * 2 + 128 * 4 * 2 + 16 * 2))
    cfg = ParallelConfig(ep=64, moe_dispatcher="deepep")
    # the RDMA part in NVSHMEM's heap: whole 512 MiB chunks (NVSHMEM_CUMEM_GRANULARITY) that
    # also hold NVSHMEM's 256 MiB (deep_ep/buffers/legacy.py)
    assert rdma + 2**28 <= 2 * 2**29 < rdma + 2**28 + 2**29
    assert moe.deepep_buffer_bytes(m, cfg) == pytest.approx(nvl + 2 * 2**29)
    assert 1.2e9 < nvl + 2 * 2**29 < 1.6e9  # ~1.4 GB a GPU
    # inside one node no NVSHMEM: the NVLink buffer alone (8 ranks: nvl recv 256, no RDMA ranks)
    nvl8 = ch * 8 * (2 * 1 + 3) * 4 + ch * 8 * 256 * (hidden + 8 + 128 * 8 + 128 * 4 + 128 * 4)
    assert moe.deepep_buffer_bytes(m, ParallelConfig(ep=8, moe_dispatcher="deepep")) == pytest.approx(nvl8)
    assert moe.deepep_buffer_bytes(m, ParallelConfig(ep=64)) == 0.0


def _cluster(gpu: str, n: int, per_node: int | None = None) -> ClusterSpec:
    g = get_gpu(gpu)
    per = per_node or g.gpus_per_node
    return ClusterSpec(g, n, per, g.nvlink_gb_s, g.network_gb_s, g.intra_node_latency_s, g.inter_node_latency_s,
                       g.nvlink_domain)


@pytest.mark.parametrize("gpu,ep,etp,ok,says", [
    ("h800", 64, 1, True, ""),
    ("h100-sxm", 8, 1, True, ""),
    ("h100-sxm", 4, 2, True, ""),
    ("b300", 32, 1, True, ""),
    ("gb200", 8, 1, False, "GB200"),            # NVL72 racks are HybridEP's
    ("gb300", 64, 1, False, "GB200/GB300"),
    ("mi300x", 8, 1, False, "AMD"),
    ("h100-sxm", 12, 1, False, "no dispatch/combine config"),
    ("h100-sxm", 1, 1, False, "TPxEP > 1"),
])
def test_dispatcher_rules_name_the_engine_or_library_rule(gpu, ep, etp, ok, says):
    err = dispatcher_error(_cluster(gpu, 512), "megatron", "deepep", ep, etp)
    assert (err is None) == ok
    if not ok:
        assert says in err


def test_deepep_is_megatrons_only():
    err = dispatcher_error(_cluster("h100-sxm", 64), "torchtitan", "deepep", 8, 1)
    assert err and "no 'deepep'" in err


def test_internode_deepep_needs_eight_gpu_nodes():
    err = dispatcher_error(_cluster("h100-sxm", 64, per_node=4), "megatron", "deepep", 16, 1)
    assert err and "exactly 8" in err


DSV3 = {
    "model": {"name": "deepseek-v3"},
    "cluster": {"gpu": "h800", "num_gpus": 2048},
    "training": {"global_batch_size": 15360, "seq_length": 4096, "dtype": "fp8"},
    "parallelism": {"tp": 1, "pp": 16, "dp": 128, "ep": 64, "micro_batch_size": 1, "zero": 1, "recompute": "full"},
}


def test_deepep_halves_deepseek_v3s_network_traffic_and_holds_its_buffer():
    """DeepSeek-V3's published layout (EP64 over 8 nodes, 4-node-limited routing): a token
    crosses InfiniBand ~3.2 times with DeepEP against 7 with the all-to-all (8 copies, 7/8 of
    them to other nodes), so the expert communication falls by about that ratio; the buffer is
    in the memory."""
    a2a = estimate(DSV3)
    req = copy.deepcopy(DSV3)
    req["parallelism"]["moe_dispatcher"] = "deepep"
    dep = estimate(req)
    ratio = a2a.prediction.breakdown.ep_comm_s / dep.prediction.breakdown.ep_comm_s
    nodes_hit = moe.expected_distinct_bins(256, 8, 32, 8, 4)
    # the rest: the all-to-all's probability exchange, the NVLink share and the latencies
    assert ratio == pytest.approx(7.0 / (nodes_hit * 7 / 8), rel=0.1)
    assert dep.prediction.step_time_s < a2a.prediction.step_time_s
    buf_gib = moe.deepep_buffer_bytes(__import__("cost_model.model.presets", fromlist=["x"]).get_preset("deepseek-v3"),
                                      ParallelConfig(ep=64, moe_dispatcher="deepep")) / 2**30
    grew = max(dep.memory_per_rank_gib) - max(a2a.memory_per_rank_gib)
    assert grew >= buf_gib * 0.99


def test_deepep_on_a_dense_model_or_nvl72_is_refused_by_field():
    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 8, "seq_length": 4096},
           "parallelism": {"dp": 8, "moe_dispatcher": "deepep"}}
    with pytest.raises(SpecError) as e:
        estimate(req)
    assert e.value.field == "parallelism.moe_dispatcher"
    req = copy.deepcopy(DSV3)
    req["cluster"] = {"gpu": "gb200", "num_gpus": 2048}
    req["parallelism"]["moe_dispatcher"] = "deepep"
    with pytest.raises(SpecError) as e:
        estimate(req)
    assert e.value.field == "parallelism.moe_dispatcher" and "GB200" in str(e.value)
