"""Hybrid sharding (ParallelConfig.dp_replicate): states sharded inside a shard group, the
groups replicating one another, priced as the engines run it. References written here by
hand: the ZeRO ladder over the shard group (Rajbhandari et al. 2020 Fig. 1; Megatron's
distributed-optimizer table, 6 + 12/d bytes per parameter for bf16 with fp32 gradients), and
the ring alpha-beta costs (Thakur et al. 2005) of a reduce-scatter and an all-gather over the
shard group and an all-reduce of one shard over the replica group (Megatron-Core
start_grad_sync; torch FSDP2 HSDP foreach_reduce). Also: ZeRO-2 as engines run it reduces every
micro-batch where their source says so (torchtitan FSDP2, DeepSpeed stage 2), once per step
under a pipeline and in Megatron."""

from __future__ import annotations

import pytest

from cost_model.hardware.catalog import get_gpu
from cost_model.model.presets import get_preset
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec
from cost_model.terms.dp import grad_sync_s, hybrid_groups, reduces_every_micro_batch, zero3_s
from cost_model.terms.states import layer_state_bytes
from cost_model.validate import validate_config
from planner import service

GPU = get_gpu("h100-sxm")
TRAINING = TrainingSpec(global_batch_size=64, seq_length=4096)
PARAMS = 200e6  # one layer's parameters on a rank


def _cluster(n: int) -> ClusterSpec:
    return ClusterSpec(GPU, n, 8, GPU.nvlink_gb_s, GPU.network_gb_s, GPU.intra_node_latency_s,
                       GPU.inter_node_latency_s)


def _ring_s(n: int, nbytes: float, gb_s: float, latency_s: float, all_reduce: bool = False) -> float:
    """Thakur et al. 2005 ring: (n-1) steps of alpha and (n-1)/n of the buffer per direction,
    twice for an all-reduce; the link's rate times the catalog's achieved fraction."""
    k = 2 if all_reduce else 1
    return k * (n - 1) * latency_s + k * (n - 1) / n * nbytes / (gb_s * 1e9 * GPU.link_efficiency)


def test_groups_are_the_inner_shard_and_the_outer_replicas():
    cfg = ParallelConfig(dp=16, cp=2, tp=2, zero=1, dp_replicate=4)
    # dense group: dp*cp = 32 ranks tp = 2 apart; shards of 8 consecutive members, 4 replicas
    assert hybrid_groups(cfg, 32, 2) == ((8, 2), (4, 16))
    assert hybrid_groups(ParallelConfig(dp=16, zero=1), 16, 1) == ((16, 1), (1, 16))


def test_states_follow_the_zero_ladder_over_the_shard_group():
    """Megatron distributed optimizer, bf16 with fp32 main grads: 6 + 12/d bytes per
    parameter, d = the shard group (dp*cp/R), not the whole data-parallel group."""
    for r, d in ((1, 16), (2, 8), (16, 1)):
        cfg = ParallelConfig(dp=16, zero=1, dp_replicate=r)
        w, g, o = layer_state_bytes(TRAINING, cfg, PARAMS, 16)
        assert w + g + o == pytest.approx(PARAMS * (6 + 12 / d))


def test_distributed_optimizer_sync_is_shard_reduce_scatter_replica_all_reduce_and_gather():
    """16 H100 in 2 nodes, dp 16, 2 instances: reduce-scatter and all-gather inside a node
    (NVLink), the 1/8 shard all-reduced across the 2 nodes (network)."""
    cluster = _cluster(16)
    cfg = ParallelConfig(dp=16, zero=1, dp_replicate=2)
    grads, params16 = PARAMS * 4, PARAMS * 2  # fp32 main grads; bf16 parameters gathered
    nv, net = (GPU.nvlink_gb_s, GPU.intra_node_latency_s), (GPU.network_gb_s, GPU.inter_node_latency_s)
    want = (_ring_s(8, grads, *nv) + _ring_s(2, grads / 8, *net, all_reduce=True) + _ring_s(8, params16, *nv))
    assert grad_sync_s(cluster, TRAINING, cfg, PARAMS, 16, 1, None) == pytest.approx(want, rel=1e-9)
    # without replicas the same formula over all 16 ranks, across the network
    flat = ParallelConfig(dp=16, zero=1)
    want_flat = _ring_s(16, grads, *net) + _ring_s(16, params16, *net)
    assert grad_sync_s(cluster, TRAINING, flat, PARAMS, 16, 1, None) == pytest.approx(want_flat, rel=1e-9)


def test_hsdp_adds_the_replica_all_reduce_to_every_backward():
    """torch FSDP2 HSDP (torchtitan zero 3): per micro-batch, all-gathers in forward and
    backward and the reduce-scatter over the shard group, then the fp32 shard all-reduced
    across replicas. With no compute to hide under, the per-micro-batch cost differs from the
    flat-shard one by exactly those collectives."""
    cluster = _cluster(16)
    hsdp = ParallelConfig(dp=16, zero=3, dp_replicate=2, engine="torchtitan")
    w16, g32 = PARAMS * 2, PARAMS * 4  # bf16 gathers, fp32 reduce (mixed_precision_reduce)
    nv, net = (GPU.nvlink_gb_s, GPU.intra_node_latency_s), (GPU.network_gb_s, GPU.inter_node_latency_s)
    comm = 2 * _ring_s(8, w16, *nv) + _ring_s(8, g32, *nv) + _ring_s(2, g32 / 8, *net, all_reduce=True)
    flat = ParallelConfig(dp=16, zero=3, engine="torchtitan")
    comm_flat = 2 * _ring_s(16, w16, *net) + _ring_s(16, g32, *net)
    got = zero3_s(cluster, TRAINING, hsdp, PARAMS, 16, 1, 0.0, 0.0, None)
    got_flat = zero3_s(cluster, TRAINING, flat, PARAMS, 16, 1, 0.0, 0.0, None)
    # the buffer copies around the collectives are the same for both
    assert got - comm == pytest.approx(got_flat - comm_flat, rel=1e-9)
    assert got < got_flat  # the gathers stay on NVLink


@pytest.mark.parametrize("engine,pp,every", [("torchtitan", 1, True), ("torchtitan", 2, False), ("deepspeed", 1, True),
                                             ("megatron", 1, False), ("runtime", 1, False)])
def test_zero2_reduces_every_micro_batch_where_the_engine_does(engine, pp, every):
    """torchtitan's FSDP2 without resharding (post-backward reshard, gradient sync on in its
    accumulation loop) and DeepSpeed stage 2 (partition_gradients reduces in every backward)
    pay per micro-batch; under torch pipelining FSDP syncs once; Megatron's and the runtime's
    distributed optimizer once per step."""
    cluster = _cluster(16)
    cfg = ParallelConfig(dp=16, pp=pp, zero=2, engine=engine)
    assert reduces_every_micro_batch(cfg) is every
    per_micro = zero3_s(cluster, TRAINING, cfg, PARAMS, 16, 1, 0.0, 0.0, None)
    per_step = grad_sync_s(cluster, TRAINING, cfg, PARAMS, 16, 1, None)
    assert (per_micro > 0, per_step > 0) == (every, not every)
    if every:
        net = (GPU.network_gb_s, GPU.inter_node_latency_s)
        # reduce-scatter of the reduce-dtype gradients (fp32 for torchtitan, bf16 grads for
        # DeepSpeed's 16-bit reduce), plus for FSDP2 the forward all-gather
        rs_bytes = PARAMS * (4 if engine == "torchtitan" else 2)
        comm = _ring_s(16, rs_bytes, *net) + (_ring_s(16, PARAMS * 2, *net) if engine == "torchtitan" else 0.0)
        assert per_micro > comm  # plus the buffer copies


def test_layouts_hybrid_sharding_cannot_take_are_refused_by_field():
    model, cluster = get_preset("llama3-8b"), _cluster(16)
    with pytest.raises(SpecError) as exc:
        validate_config(model, cluster, TRAINING, ParallelConfig(dp=16, zero=1, dp_replicate=3))
    assert exc.value.field == "parallelism.dp_replicate" and "does not divide dp=16" in exc.value.message
    with pytest.raises(SpecError) as exc:
        validate_config(model, cluster, TRAINING, ParallelConfig(dp=16, zero=0, dp_replicate=2))
    assert exc.value.field == "parallelism.dp_replicate" and "zero >= 1" in exc.value.message


def _request(engine: str, **search) -> dict:
    return {"model": {"name": "llama3-8b"}, "engine": engine, "cluster": {"gpu": "h100-sxm", "num_gpus": 16},
            "training": {"global_batch_size": 64, "seq_length": 4096},
            "search": {"tp": 1, "pp": 1, "cp": 1, "targets": [], **search}}


def test_engines_without_hybrid_sharding_refuse_it_with_the_reason():
    with pytest.raises(service.Infeasible) as exc:
        service.plan(_request("deepspeed", dp_replicate=2))
    assert "MiCS" in str(exc.value)
    with pytest.raises(service.Infeasible) as exc:
        service.plan(_request("megatron", dp_replicate=2, zero=3))
    assert "--num-distributed-optimizer-instances" in str(exc.value)


def test_pinned_hybrid_plan_prices_as_its_estimate():
    """A searched hybrid plan and the estimate of its own parallelism block agree: the search
    and the estimate price the same layout."""
    plan = service.plan(_request("torchtitan", dp_replicate=2, zero=3)).model_dump(mode="json")
    assert plan["parallelism"]["dp_replicate"] == 2
    est = service.estimate({"model": {"name": "llama3-8b"}, "engine": "torchtitan",
                            "cluster": {"gpu": "h100-sxm", "num_gpus": 16},
                            "training": {"global_batch_size": 64, "seq_length": 4096},
                            "parallelism": plan["parallelism"]})
    assert est.prediction.step_time_s == pytest.approx(plan["prediction"]["step_time_s"], rel=1e-9)
    assert est.prediction.memory.peak_gib == pytest.approx(plan["prediction"]["memory"]["peak_gib"], rel=1e-9)
