"""The optimizer offload's price against the hand formula of its sources (terms/offload.py):
ZeRO-Offload (Ren et al. 2021, USENIX ATC §4.1): gradients to the host, CPU Adam, parameters
back; the three stream under one another, so the step takes the longest. The GPU keeps its
16-bit weights and gradient buffer; the host the fp32 master, the Adam moments and a pinned
fp32 gradient copy of the owned shard, for every GPU of the node."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_model.estimate import estimate
from cost_model.hardware.catalog import get_gpu
from cost_model.model.flops import total_params
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.results import GIB
from planner.request.parse import parse_cluster, parse_model, parse_training

MODEL = parse_model("llama3-70b")
TRAINING = parse_training({"global_batch_size": 64, "seq_length": 8192})
TP8 = dict(tp=8, pp=1, dp=1, zero=1, sequence_parallel=True, recompute="full", recompute_layers=(80,))


def _cluster(**kw):
    return parse_cluster({"gpu": "h100-sxm", "num_gpus": 8, **kw})


def test_offload_step_is_the_longest_of_copies_and_cpu_adam():
    """tp 8, one data-parallel rank: each GPU owns P/8 parameters (norms replicated: ~1e-5 more).
    CPU Adam: 2K + 3 x 4 = 36 bytes of host DRAM per parameter (K = 12), the node's 8 GPUs
    sharing its DRAM bandwidth at the catalog's efficiency; the link: 4-byte gradients out,
    4-byte parameters in, per GPU, at the link efficiency."""
    gpu = get_gpu("h100-sxm")
    est = estimate(MODEL, _cluster(), TRAINING, ParallelConfig(**TP8, optimizer_offload=True))
    owned = total_params(MODEL) / 8
    cpu_s = owned * (2 * 12 + 3 * 4) / (gpu.host_dram_gb_s * 1e9 * gpu.host_memory_efficiency / 8)
    link_s = owned * 4 / (gpu.host_link_gb_s * 1e9 * gpu.link_efficiency)
    assert est.prediction.breakdown.optimizer_s == pytest.approx(max(cpu_s, link_s), rel=1e-3)
    assert cpu_s > link_s  # DGX H100: the CPU step binds, not PCIe Gen5


def test_offload_moves_the_optimizer_states_to_the_host():
    cluster = _cluster()
    on = estimate(MODEL, cluster, TRAINING, ParallelConfig(**TP8, optimizer_offload=True))
    off = estimate(MODEL, cluster, TRAINING, ParallelConfig(**TP8))
    m_on, m_off = on.prediction.memory, off.prediction.memory
    assert m_on.optimizer_gib == 0 and m_off.optimizer_gib > 0
    assert (m_on.weights_gib, m_on.grads_gib) == (m_off.weights_gib, m_off.grads_gib)  # what stays on the GPU
    # Megatron's 12 optimizer bytes (fp32 master + moments) + the 4-byte gradient copy, 8 GPUs per node
    owned = total_params(MODEL) / 8
    assert m_on.host_gib == pytest.approx(8 * owned * (12 + 4) / GIB, rel=1e-3)
    assert m_on.host_capacity_gib == pytest.approx(2048e9 / GIB)  # DGX H100: 2 TB
    assert not off.fits and on.fits
    assert on.prediction.step_time_s > off.prediction.step_time_s  # it only adds time
    assert any("offloaded" in n for n in on.notes)


def test_host_memory_too_small_does_not_fit():
    est = estimate(MODEL, _cluster(host_memory_gb=512.0), TRAINING, ParallelConfig(**TP8, optimizer_offload=True))
    assert est.prediction.memory.host_gib > est.prediction.memory.host_capacity_gib
    assert not est.fits
    assert any("does NOT fit" in n for n in est.notes)


@pytest.mark.parametrize("cfg, words", [
    (dict(TP8, zero=0), "distributed optimizer"),
    (dict(TP8, engine="torchtitan", sequence_parallel=False), "enable_cpu_offload"),
])
def test_engines_that_do_not_run_it_are_refused(cfg, words):
    with pytest.raises(SpecError) as err:
        estimate(MODEL, _cluster(), TRAINING, ParallelConfig(**cfg, optimizer_offload=True))
    assert err.value.field == "parallelism.optimizer_offload" and words in str(err.value)


def test_a_part_without_host_numbers_is_refused():
    gpu = replace(get_gpu("h100-sxm"), host_link_gb_s=0.0)
    cluster = replace(_cluster(), gpu=gpu)
    with pytest.raises(SpecError, match="host link"):
        estimate(MODEL, cluster, TRAINING, ParallelConfig(**TP8, optimizer_offload=True))


def test_catalog_host_links_are_the_interfaces():
    """PCIe x16 per direction at 128b/130b: Gen4 16 GT/s ~31.5 GB/s, Gen5 32 GT/s ~63 GB/s;
    NVLink-C2C 900 GB/s bidirectional (GH200)."""
    assert get_gpu("a100-80gb").host_link_gb_s == pytest.approx(16 * 16 * 128 / 130 / 8, rel=0.01)
    assert get_gpu("h100-sxm").host_link_gb_s == pytest.approx(32 * 16 * 128 / 130 / 8, rel=0.01)
    assert get_gpu("gh200").host_link_gb_s == pytest.approx(900 / 2)
    assert all(g.host_source for g in (get_gpu(n) for n in ("h100-sxm", "b200", "gb200", "mi300x")))


@pytest.mark.parametrize("name", ["a100-80gb", "h100-sxm", "h200", "b200", "gb200", "gh200", "mi300x", "v100-32gb"])
def test_the_offload_never_shortens_the_step(name):
    """The search tries the offload only where a layout does not fit without it
    (space.offload_values): that holds while the offloaded step is never the faster one,
    checked here on every part with host numbers, for the parameters of one llama3-70b rank."""
    from cost_model.terms.states import optimizer_step_s

    cluster = parse_cluster({"gpu": name, "num_gpus": 64})
    for zero, dp in ((1, 8), (1, 1), (3, 8)):
        cfg = ParallelConfig(tp=8, dp=dp, zero=zero, engine="deepspeed" if zero == 3 else "megatron")
        on = optimizer_step_s(cluster, TRAINING, replace(cfg, optimizer_offload=True), 1e9, dp)
        assert on > optimizer_step_s(cluster, TRAINING, cfg, 1e9, dp)
