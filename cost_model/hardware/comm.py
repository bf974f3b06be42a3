"""Alpha-beta costs of collectives over a two-level (NVLink inside a node, network across
nodes) hierarchy.

Ring algorithms (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009): for n ranks and
a buffer of B bytes,
  all-reduce      2(n-1) alpha + 2(n-1)/n * B / bw
  reduce-scatter  (n-1) alpha + (n-1)/n * B / bw       (B = the full, unsharded buffer)
  all-gather      (n-1) alpha + (n-1)/n * B / bw       (B = the full, gathered buffer)
  all-to-all      (n-1) alpha + (n-1)/n * B / bw       (B = bytes each rank sends in all)
  send/recv       alpha + B / bw
`bw` is the per-GPU per-direction bandwidth of the slowest level the group crosses, times
the achieved fraction `link_efficiency` from the catalog (NCCL's bus bandwidth runs below
the link rate: nccl-tests report ~80% on NVLink and IB). Deviation: NCCL switches to trees
and NVLS for some sizes; alpha is charged per ring step, which over-charges large groups
with tiny messages only.

Placement: ranks are laid out in Megatron's order tp-cp-ep-dp-pp (tp fastest). A group of
`size` ranks whose members are `stride` ranks apart lies in blocks of size*stride
consecutive ranks; it stays on NVLink when that block fits the NVLink domain and divides
it, otherwise the slowest group crosses the network. The NVLink domain is
`cluster.nvlink_domain`: one node's GPUs on an HGX/DGX board, 72 in a GB200 NVL72 rack,
whose NVLink Switch trays connect every GPU of the rack at the full NVLink rate (NVIDIA
GB200 NVL72 datasheet: 130 TB/s over 72 GPUs = 1.8 TB/s each).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.specs import vocab as V
from cost_model.specs.inputs import ClusterSpec


@dataclass(frozen=True)
class Link:
    bandwidth_bytes_s: float
    latency_s: float
    level: str  # "intra" | "inter"


def group_link(cluster: ClusterSpec, size: int, stride: int) -> Link:
    """The link that bounds a group of `size` ranks spaced `stride` apart."""
    g = cluster.gpu
    span = size * stride  # consecutive ranks one group's members lie in
    domain = cluster.nvlink_domain or cluster.gpus_per_node
    # on NVLink only if every such block is: no larger than the domain and dividing it
    # (tp=3 on 8-GPU nodes puts ranks 6-8 in two nodes)
    if size <= 1 or (span <= domain and domain % span == 0):
        return Link(cluster.intra_node_gb_s * 1e9 * g.link_efficiency, cluster.intra_node_latency_s, V.LEVEL_INTRA)
    return Link(cluster.inter_node_gb_s * 1e9 * g.link_efficiency, cluster.inter_node_latency_s, V.LEVEL_INTER)


def _ring(name: str, nbytes: float, size: int, link: Link, fits: dict | None, steps: int, volume: float) -> float:
    """steps * alpha + volume * B / bw, or the profile's measured fit for this collective
    and link level (fits are taken in the same byte convention: alpha + volume * B * beta)."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    fit = fits.get((name, link.level)) if fits else None
    if fit:
        return fit.alpha_s + volume * nbytes * fit.beta_s_per_byte
    return steps * link.latency_s + volume * nbytes / link.bandwidth_bytes_s


def all_reduce_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Ring all-reduce: 2(n-1) alpha + 2(n-1)/n B/bw."""
    return _ring(V.ALL_REDUCE, nbytes, size, link, fits, 2 * (size - 1), 2 * (size - 1) / max(size, 1))


def reduce_scatter_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Ring reduce-scatter of a B-byte buffer: (n-1) alpha + (n-1)/n B/bw."""
    return _ring(V.REDUCE_SCATTER, nbytes, size, link, fits, size - 1, (size - 1) / max(size, 1))


def all_gather_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Ring all-gather into a B-byte buffer: (n-1) alpha + (n-1)/n B/bw."""
    return _ring(V.ALL_GATHER, nbytes, size, link, fits, size - 1, (size - 1) / max(size, 1))


def all_to_all_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Pairwise all-to-all, B bytes sent per rank: (n-1) alpha + (n-1)/n B/bw
    (DeepSeek-V3 §3.2.2 dispatch/combine)."""
    return _ring(V.ALL_TO_ALL, nbytes, size, link, fits, size - 1, (size - 1) / max(size, 1))


def send_recv_s(nbytes: float, link: Link, fits: dict | None = None) -> float:
    """Point-to-point: alpha + B/bw."""
    return _ring(V.SEND_RECV, nbytes, 2, link, fits, 1, 1.0)
