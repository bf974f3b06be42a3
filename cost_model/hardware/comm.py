"""Alpha-beta costs of collectives over a two-level hierarchy (NVLink inside a node or rack,
the network across).

Ring algorithms (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009): for n ranks and
a buffer of B bytes,
  all-reduce      2(n-1) steps, 2(n-1)/n * B / busbw
  reduce-scatter  (n-1) steps,  (n-1)/n * B / busbw       (B = the full, unsharded buffer)
  all-gather      (n-1) steps,  (n-1)/n * B / busbw       (B = the full, gathered buffer)
  all-to-all      (n-1) steps,  (n-1)/n * B / bw          (B = bytes each rank sends in all)
  send/recv       1 step,       B / bw
The (n-1)/n and 2(n-1)/n factors are nccl-tests' bus-bandwidth conversion (NVIDIA/nccl-tests
doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for all-gather and
reduce-scatter), so `busbw` is the number nccl-tests prints.

Across nodes a group runs at one GPU's share of its node's NICs
(`ClusterSpec.inter_node_gb_s` = NICs x rate / GPUs per node; with one NIC per GPU, that
NIC), at `link_efficiency` of it; all-to-all splits a rank's peers into those on its NVLink
domain and the rest, both driven at once (the slower sets the time). Latency: steps x the
slowest level's. Oversubscription (`ClusterSpec.oversubscription` = leaf down / up) slows
all-to-all, and rings only off a rail-optimised fabric (on one, NCCL keeps each ring on its
rail, NCCL_CROSS_NIC).

Placement: ranks are laid out in Megatron's order tp-cp-ep-dp-pp (tp fastest). A group of
`size` ranks whose members are `stride` ranks apart lies in blocks of size*stride
consecutive ranks; it stays on NVLink when that block fits the NVLink domain and divides
it, otherwise it crosses the network with `domain // stride` members in each domain (one
when the stride spans a domain). The NVLink domain is `cluster.nvlink_domain`: one node's
GPUs on an HGX/DGX board, 72 in a GB200 NVL72 rack (NVIDIA GB200 NVL72 datasheet: 130 TB/s
over 72 GPUs = 1.8 TB/s each).

Measured fits (a profile's `comm`) replace the analytic price per collective and level,
and per members-per-domain where the profile measured that shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.specs import vocab as V
from cost_model.specs.inputs import ClusterSpec


@dataclass(frozen=True)
class Link:
    """What a group of ranks communicates over. `bandwidth_bytes_s`: the group's ring bus
    bandwidth; `latency_s`: the per-step latency of its slowest level. For a group crossing
    domains also: members per domain, domains spanned, the per-member network rate (what an
    all-to-all or a send gets) and the NVLink rate and latency of its intra-domain steps."""
    bandwidth_bytes_s: float
    latency_s: float
    level: str  # "intra" | "inter"
    members: int = 1  # group members per NVLink domain
    domains: int = 1  # NVLink domains (nodes, racks) the group spans
    member_net_bytes_s: float = 0.0  # network bytes/s one member gets when all send at once
    member_rail_bytes_s: float = 0.0  # the same for traffic that stays on its rail (sends to the same local rank)
    intra_bytes_s: float = 0.0
    intra_latency_s: float = 0.0

    def __post_init__(self):
        # a Link given only its bandwidth and latency is one level: every path runs at them
        for name, value in (("member_net_bytes_s", self.bandwidth_bytes_s), ("member_rail_bytes_s", self.bandwidth_bytes_s),
                            ("intra_bytes_s", self.bandwidth_bytes_s), ("intra_latency_s", self.latency_s)):
            if not getattr(self, name):
                object.__setattr__(self, name, value)


def members_per_domain(domain: int, size: int, stride: int) -> int:
    """Members of a group of `size` ranks `stride` apart that share one NVLink domain."""
    if stride >= domain:
        return 1
    return max(1, min(size, domain // stride))


def group_link(cluster: ClusterSpec, size: int, stride: int) -> Link:
    """The links a group of `size` ranks spaced `stride` apart communicates over."""
    g = cluster.gpu
    span = size * stride  # consecutive ranks one group's members lie in
    domain = cluster.nvlink_domain or cluster.gpus_per_node
    intra = cluster.intra_node_gb_s * 1e9 * g.link_efficiency
    # on NVLink only if every such block is: no larger than the domain and dividing it
    # (tp=3 on 8-GPU nodes puts ranks 6-8 in two nodes)
    if size <= 1 or (span <= domain and domain % span == 0):
        return Link(intra, cluster.intra_node_latency_s, V.LEVEL_INTRA, members=size, intra_bytes_s=intra,
                    intra_latency_s=cluster.intra_node_latency_s)
    m = members_per_domain(domain, size, stride)
    share = cluster.inter_node_gb_s * 1e9 * g.link_efficiency  # one GPU's share of its node's NICs
    a2a_share = share / cluster.oversubscription
    ring_share = share if cluster.rail_optimized else a2a_share
    ring = ring_share  # a ring crossing nodes runs at one member's share
    return Link(ring, cluster.inter_node_latency_s, V.LEVEL_INTER, members=m, domains=-(-size // m),
                member_net_bytes_s=a2a_share, member_rail_bytes_s=ring_share, intra_bytes_s=intra, intra_latency_s=cluster.intra_node_latency_s,
                )


def _fit(fits: dict | None, name: str, link: Link):
    """A profile's measured fit for this collective on this level, for this group shape
    (members per domain) where the profile has it, else for the level."""
    if not fits:
        return None
    return fits.get((name, link.level, link.members)) or fits.get((name, link.level))


def ring_latency_s(link: Link, size: int, steps_per_rank: int) -> float:
    """steps_per_rank * (n - 1) steps at the link's latency."""
    return steps_per_rank * (size - 1) * link.latency_s


def _ring(name: str, nbytes: float, size: int, link: Link, fits: dict | None, steps_per_rank: int,
          volume: float) -> float:
    """Ring latency + volume * B / busbw, or the profile's measured fit (fits are taken in the
    same byte convention: alpha + volume * B * beta)."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    fit = _fit(fits, name, link)
    if fit:
        return fit.alpha_s + volume * nbytes * fit.beta_s_per_byte
    return ring_latency_s(link, size, steps_per_rank) + volume * nbytes / link.bandwidth_bytes_s


def all_reduce_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Ring all-reduce: 2(n-1) steps + 2(n-1)/n B/busbw."""
    return _ring(V.ALL_REDUCE, nbytes, size, link, fits, 2, 2 * (size - 1) / max(size, 1))


def reduce_scatter_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Ring reduce-scatter of a B-byte buffer: (n-1) steps + (n-1)/n B/busbw."""
    return _ring(V.REDUCE_SCATTER, nbytes, size, link, fits, 1, (size - 1) / max(size, 1))


def all_gather_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Ring all-gather into a B-byte buffer: (n-1) steps + (n-1)/n B/busbw."""
    return _ring(V.ALL_GATHER, nbytes, size, link, fits, 1, (size - 1) / max(size, 1))


def all_to_all_s(nbytes: float, size: int, link: Link, fits: dict | None = None) -> float:
    """Pairwise all-to-all, B bytes sent per rank (DeepSeek-V3 §3.2.2 dispatch/combine; NCCL
    alltoall is a send/recv to every peer). Within a domain: (n-1) alpha + (n-1)/n B/bw.
    Across domains a rank's peers split into the m-1 on its domain (NVLink) and the rest
    (the network, at the member's share of the NICs: the aggregate does not help, every
    member's bytes cross); both run at once and the slower sets the time."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    fit = _fit(fits, V.ALL_TO_ALL, link)
    if fit:
        return fit.alpha_s + (size - 1) / size * nbytes * fit.beta_s_per_byte
    if link.level != V.LEVEL_INTER:
        return (size - 1) * link.latency_s + (size - 1) / size * nbytes / link.bandwidth_bytes_s
    m = link.members
    t_intra = nbytes * (m - 1) / size / link.intra_bytes_s if m > 1 else 0.0
    t_inter = nbytes * (size - m) / size / link.member_net_bytes_s
    return (m - 1) * link.intra_latency_s + (size - m) * link.latency_s + max(t_intra, t_inter)


def send_recv_s(nbytes: float, link: Link, fits: dict | None = None) -> float:
    """Point-to-point: alpha + B/bw; across domains at one member's share of the NICs (every
    rank of a node sends to its peer at once; pipeline peers share a local rank, so a rail)."""
    if nbytes <= 0:
        return 0.0
    fit = _fit(fits, V.SEND_RECV, link)
    if fit:
        return fit.alpha_s + nbytes * fit.beta_s_per_byte
    bw = link.member_rail_bytes_s if link.level == V.LEVEL_INTER else link.bandwidth_bytes_s
    return link.latency_s + nbytes / bw
