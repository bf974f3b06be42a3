"""The cluster network as operators describe it: the NIC string, the systems catalog, one
GPU's share of its node's NICs, and oversubscription."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_model.hardware import comm
from cost_model.hardware.catalog import get_gpu
from cost_model.hardware.network import SYSTEMS, parse_network
from cost_model.hardware.profile_schema import profile_from_dict, profile_to_dict
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ClusterSpec

GIB8 = 8 * 2**30


def _cluster(gpu: str, nodes: int, gpus_per_node: int, network: str, **kw) -> ClusterSpec:
    g = get_gpu(gpu)
    net = parse_network(network)
    return ClusterSpec(g, nodes * gpus_per_node, gpus_per_node, g.nvlink_gb_s, net.per_gpu_gb_s(gpus_per_node),
                       g.intra_node_latency_s, g.inter_node_latency_s, nics_per_node=net.nics, **kw)


def _busbw(kind: str, cluster: ClusterSpec, size: int, stride: int = 1, nbytes: float = GIB8) -> float:
    link = comm.group_link(cluster, size, stride)
    if kind == "all_reduce":
        return 2 * (size - 1) / size * nbytes / comm.all_reduce_s(nbytes, size, link) / 1e9
    fn = comm.all_gather_s if kind == "all_gather" else comm.reduce_scatter_s
    return (size - 1) / size * nbytes / fn(nbytes, size, link) / 1e9


@pytest.mark.parametrize("gpu,network,nic_gb_s", [("a100-80gb", "8 x 200 Gb/s", 25.0), ("h100-sxm", "8 x 400 Gb/s", 50.0)])
def test_one_member_per_node_is_the_per_gpu_rate(gpu, network, nic_gb_s):
    """A group with one member per node (dp across tp=8 nodes) rides one NIC: the per-GPU rate,
    as the shorthand inter_node_gb_s prices it, the same either way the network is given."""
    c = _cluster(gpu, 4, 8, network)
    g = get_gpu(gpu)
    assert _busbw("all_reduce", c, 4, stride=8) == pytest.approx(nic_gb_s * g.link_efficiency, rel=1e-3)  # less the latency
    shorthand = ClusterSpec(g, 32, 8, g.nvlink_gb_s, nic_gb_s, g.intra_node_latency_s, g.inter_node_latency_s)
    assert comm.group_link(shorthand, 4, 8) == comm.group_link(c, 4, 8)
    assert comm.group_link(shorthand, 32, 1) == comm.group_link(c, 32, 1)


def test_oversubscription():
    """A 2:1 leaf halves all-to-all across nodes; rings stay on their rail when the fabric is
    rail-optimised, and are halved when it is not."""
    base = _cluster("h100-sxm", 8, 8, "8 x 400 Gb/s")
    rail = replace(base, oversubscription=2.0)
    flat = replace(base, oversubscription=2.0, rail_optimized=False)
    a2a = [comm.all_to_all_s(GIB8, 64, comm.group_link(c, 64, 1)) for c in (base, rail, flat)]
    assert a2a[1] == pytest.approx(2 * a2a[0], rel=0.01)
    one = [_busbw("all_reduce", c, 8, stride=8) for c in (base, rail, flat)]
    assert one[1] == pytest.approx(one[0])
    assert one[2] == pytest.approx(one[0] / 2, rel=1e-3)


@pytest.mark.parametrize("text,nics,gb_s", [("8 x 400 Gb/s", 8, 50.0), ("8x400Gbps", 8, 50.0),
                                              ("4 x 100 Gb RoCE", 4, 12.5), ("2 x 25 GB/s", 2, 25.0),
                                              ("8 x 200 Gb/s IB rail-optimised", 8, 25.0)])
def test_parse_network(text, nics, gb_s):
    net = parse_network(text)
    assert (net.nics, net.nic_gb_s) == (nics, gb_s)


@pytest.mark.parametrize("text", ["400 Gb/s", "8 x", "8 x 400 Gb/s IBB", "eight x 400 Gb/s"])
def test_parse_network_refuses(text):
    with pytest.raises(SpecError) as e:
        parse_network(text)
    assert e.value.field == "cluster.network"


def test_systems_catalog():
    """Every system names a catalog GPU, a source, and NICs the node can hold."""
    for s in SYSTEMS.values():
        assert get_gpu(s.gpu).name == s.gpu
        assert s.source
        assert s.network.nics >= 1 and s.network.nic_gb_s > 0


def test_profile_fits_override_per_level_and_group_shape():
    """A measured fit replaces the analytic price: one taken on a group shape (members per
    node) prices that shape, one without it prices every shape of its level; the profile file
    carries the shape through a round trip."""
    c = _cluster("h100-sxm", 4, 8, "8 x 400 Gb/s")
    rows = [{"collective": "all_gather", "level": "inter", "alpha_s": 1e-3, "beta_s_per_byte": 1e-9},
            {"collective": "all_gather", "level": "inter", "alpha_s": 2e-3, "beta_s_per_byte": 3e-9,
             "members_per_node": 8}]
    prof = profile_from_dict({"schema_version": 1, "device": "h100-sxm", "comm": rows})
    assert profile_from_dict(profile_to_dict(prof)).comm == prof.comm
    nbytes = 1e9
    full = comm.group_link(c, 32, 1)  # 8 members per node
    one = comm.group_link(c, 4, 8)  # 1 member per node
    assert comm.all_gather_s(nbytes, 32, full, prof.comm) == pytest.approx(2e-3 + 31 / 32 * nbytes * 3e-9)
    assert comm.all_gather_s(nbytes, 4, one, prof.comm) == pytest.approx(1e-3 + 3 / 4 * nbytes * 1e-9)
    # an intra-node group has no fit: analytic
    intra = comm.group_link(c, 8, 1)
    assert comm.all_gather_s(nbytes, 8, intra, prof.comm) == comm.all_gather_s(nbytes, 8, intra)
