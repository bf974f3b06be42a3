"""The cluster network as operators describe it: so many NICs per node at such a rate
("8 x 400 Gb/s", "4 x 100 Gb RoCE"), rail-optimised or not, and the leaf switches'
oversubscription; and the catalog of common systems with the datasheet each number came from.

The cost model prices collectives from one GPU's share of its node's NICs
(`ClusterSpec.inter_node_gb_s` = NICs x rate / GPUs per node; comm.py says how a group of m
members per node uses m such shares). A per-GPU `inter_node_gb_s` alone is the shorthand for
one NIC per GPU at that rate.

Rates: vendors quote NIC line rates in gigabits per second (HDR 200 Gb/s, NDR 400 Gb/s,
XDR / ConnectX-8 800 Gb/s); the cost model works in gigabytes per second per direction, so
400 Gb/s = 50 GB/s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cost_model.specs.errors import SpecError, close_match

BITS_PER_BYTE = 8

# "8 x 400 Gb/s", "8x400Gbps", "4 x 100 Gb RoCE", "2 x 25 GB/s", "8 x 400G IB rail-optimised"
_NETWORK = re.compile(
    r"^\s*(?P<count>\d+)\s*[x×*]\s*(?P<rate>\d+(?:\.\d+)?)\s*(?P<unit>gbits/s|gbit/s|gbits|gbit|gbps|gb/s|gb|g|GB/s|GBps|GB)"
    r"(?P<rest>(?:\s+[\w-]+)*)\s*$",
    re.IGNORECASE,
)
# words a description may carry after the rate: the fabric's kind (not priced differently:
# NCCL's busbw over IB and RoCE at the same rate is the same, docs/results.md) and its layout
FABRIC_WORDS = ("ib", "infiniband", "roce", "rocev2", "ethernet", "efa", "slingshot", "nvlink")
RAIL_WORDS = ("rail-optimised", "rail-optimized", "rail")
FLAT_WORDS = ("non-rail", "flat", "top-of-rack", "tor")
UNITS_BYTES = ("GB/s", "GBps", "GB")  # upper-case B: bytes


@dataclass(frozen=True)
class Network:
    """A node's network: `nics` adapters of `nic_gb_s` GB/s per direction each."""
    nics: int
    nic_gb_s: float
    rail_optimized: bool | None = None  # None: the description does not say

    @property
    def node_gb_s(self) -> float:
        return self.nics * self.nic_gb_s

    def per_gpu_gb_s(self, gpus_per_node: int) -> float:
        """One GPU's share of the node's NICs (ClusterSpec.inter_node_gb_s)."""
        return self.node_gb_s / gpus_per_node

    def describe(self) -> str:
        return f"{self.nics} x {format_gbit(self.nic_gb_s)} Gb/s"


def format_gbit(gb_s: float) -> str:
    gbit = gb_s * BITS_PER_BYTE
    return f"{gbit:.0f}" if abs(gbit - round(gbit)) < 1e-9 else f"{gbit:g}"


def parse_network(text: str, field: str = "cluster.network") -> Network:
    """`"8 x 400 Gb/s"` -> Network(8, 50.0). Gigabits (Gb/s, Gbps, Gb, G) as vendors write
    them, or gigabytes (GB/s, upper-case B); after the rate, optional words naming the fabric
    (IB, RoCE, Ethernet, EFA...) and its layout (rail-optimised, or flat / top-of-rack)."""
    m = _NETWORK.match(text or "")
    if not m:
        raise SpecError(field, f"cannot read {text!r}: write NICs x rate, e.g. \"8 x 400 Gb/s\" (gigabits, as vendors "
                        "quote them) or \"8 x 50 GB/s\" (gigabytes)", allowed=["8 x 400 Gb/s", "4 x 100 Gb RoCE",
                                                                                "8 x 50 GB/s"])
    count, rate, unit = int(m["count"]), float(m["rate"]), m["unit"]
    if count < 1:
        raise SpecError(field, f"needs at least one NIC, got {count}")
    if rate <= 0:
        raise SpecError(field, f"needs a positive rate, got {rate}")
    in_bytes = unit in UNITS_BYTES
    gb_s = rate if in_bytes else rate / BITS_PER_BYTE
    rail = None
    for word in (m["rest"] or "").split():
        w = word.lower()
        if w in RAIL_WORDS:
            rail = True
        elif w in FLAT_WORDS:
            rail = False
        elif w not in FABRIC_WORDS:
            known = (*FABRIC_WORDS, *RAIL_WORDS, *FLAT_WORDS)
            raise SpecError(field, f"unknown word {word!r} in {text!r}", allowed=list(known),
                            suggestion=close_match(w, known))
    return Network(count, gb_s, rail)


# --------------------------------------------------------------------------- systems


@dataclass(frozen=True)
class System:
    """A common system: its GPU (catalog.py), GPUs and compute NICs per node (per tray for
    NVL72 racks), the NVLink domain, the fabric's layout, and the datasheet for each."""
    name: str
    description: str
    gpu: str
    gpus_per_node: int
    network: Network
    nvlink_domain: int | None
    oversubscription: float
    nvls: bool  # NVLink SHARP in the NVSwitches (recorded; not priced)
    source: str

    @property
    def rail_optimized(self) -> bool:
        return bool(self.network.rail_optimized)


def _system(name: str, description: str, gpu: str, gpus_per_node: int, network: str, source: str,
            nvlink_domain: int | None = None, oversubscription: float = 1.0, nvls: bool = False) -> System:
    return System(name, description, gpu, gpus_per_node, parse_network(network, f"systems.{name}"), nvlink_domain,
                  oversubscription, nvls, source)


_SUPERPOD = "rail-optimised full fat tree (1:1)"
SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        _system("dgx-a100", "NVIDIA DGX A100 (8x A100 80GB), DGX SuperPOD fabric", "a100-80gb", 8,
                "8 x 200 Gb/s IB rail-optimised",
                "NVIDIA DGX A100 datasheet (2020): 8x single-port ConnectX-6 VPI 200 Gb/s HDR InfiniBand for "
                "compute; NVIDIA DGX SuperPOD with DGX A100 reference architecture (RA-10213): " + _SUPERPOD),
        _system("aws-p4d", "AWS EC2 p4d.24xlarge (8x A100 40GB)", "a100-40gb", 8, "4 x 100 Gb/s EFA flat",
                "AWS EC2 P4 instances: p4d.24xlarge 400 Gbps EFA networking (4 x 100 Gbps EFA interfaces), 600 GB/s "
                "NVSwitch; fabric layout not published (not rail-optimised)"),
        _system("dgx-h100", "NVIDIA DGX H100 (8x H100 SXM5), DGX SuperPOD fabric", "h100-sxm", 8,
                "8 x 400 Gb/s IB rail-optimised",
                "NVIDIA DGX H100 datasheet (2023): 8x 400 Gb/s NDR (4 OSFP ports, ConnectX-7) for compute, NVLink4 "
                "900 GB/s with NVSwitch (NVLink SHARP); DGX SuperPOD with DGX H100 reference architecture "
                "(RA-11333): " + _SUPERPOD, nvls=True),
        _system("dgx-h200", "NVIDIA DGX H200 (8x H200), DGX SuperPOD fabric", "h200", 8,
                "8 x 400 Gb/s IB rail-optimised",
                "NVIDIA DGX H200 datasheet (2024): 8x single-port ConnectX-7 400 Gb/s NDR for compute; NVSwitch "
                "with NVLink SHARP; DGX SuperPOD reference architecture: " + _SUPERPOD, nvls=True),
        _system("dgx-b200", "NVIDIA DGX B200 (8x B200), DGX SuperPOD fabric", "b200", 8,
                "8 x 400 Gb/s IB rail-optimised",
                "NVIDIA DGX B200 datasheet (2024): 8x single-port ConnectX-7 400 Gb/s NDR for compute, NVLink5 "
                "1.8 TB/s with NVSwitch (NVLink SHARP); DGX SuperPOD with DGX B200 reference architecture: "
                + _SUPERPOD, nvls=True),
        _system("gb200-nvl72", "NVIDIA GB200 NVL72 rack (18 compute trays of 4 GPUs)", "gb200", 4,
                "4 x 400 Gb/s IB rail-optimised",
                "NVIDIA DGX GB200 datasheet / GB200 NVL72 (2024): 72 GPUs on one NVLink5 domain (130 TB/s); per "
                "compute tray 4 GPUs and 4x ConnectX-7 400 Gb/s for the compute fabric; DGX SuperPOD with DGX GB200 "
                "reference architecture: " + _SUPERPOD, nvlink_domain=72, nvls=True),
        _system("gb300-nvl72", "NVIDIA GB300 NVL72 rack (18 compute trays of 4 GPUs)", "gb300", 4,
                "4 x 800 Gb/s IB rail-optimised",
                "NVIDIA GB300 NVL72 datasheet (2025): 72 GPUs on one NVLink5 domain; per compute tray 4x ConnectX-8 "
                "SuperNIC 800 Gb/s for the compute fabric", nvlink_domain=72, nvls=True),
        _system("mi300x-8x400", "AMD Instinct MI300X platform (8 GPUs) as Azure ND MI300X v5", "mi300x", 8,
                "8 x 400 Gb/s IB rail-optimised",
                "AMD Instinct MI300X platform (8 OAM GPUs, Infinity Fabric); Microsoft Azure ND MI300X v5 series: "
                "8x 400 Gb/s NDR InfiniBand per VM, one per GPU (3.2 Tb/s), rail-optimised non-blocking fat tree"),
    )
}


def get_system(name: str) -> System:
    key = name.strip().lower()
    if key not in SYSTEMS:
        raise SpecError("cluster.system", f"unknown system {name!r}", allowed=sorted(SYSTEMS),
                        suggestion=close_match(name, SYSTEMS))
    return SYSTEMS[key]
