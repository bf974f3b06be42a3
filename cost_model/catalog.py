"""GPU catalog: every hardware number the cost model uses, with the datasheet it came from.

Peak FLOP/s are dense (no 2:4 sparsity), in TFLOP/s. `nvlink_gb_s` is per GPU per
direction inside a node (NVLink/Infinity Fabric/PCIe); `network_gb_s` is per GPU per
direction across nodes (the usual one NIC per GPU: 200 Gb/s HDR = 25 GB/s, 400 Gb/s NDR =
50 GB/s). `memory_gib` is the capacity a framework can allocate (cudaMemGetInfo total).

Efficiency-model constants (`gemm_max_efficiency`, `gemm_half_dim`, `attention_efficiency`,
`sdpa_attention_efficiency`, `fp8_gemm_ratio`, `memory_bound_efficiency`, `link_efficiency`)
are not datasheet numbers: they are fitted or taken from published kernel benchmarks, one set
per GPU family (_AMPERE, _HOPPER_EFF, _BLACKWELL_EFF, _CDNA_EFF below), and
`efficiency_source` says which. The A100 values are fitted to the calibration set
(validation/published.py, Narayanan et al. SC'21 Tables 1-2); Hopper/Blackwell use the same
shape model with the attention kernels' published throughput (FlashAttention-2/3 papers) and
are checked on the dense rows of validation/published_modern.py.
"""

from __future__ import annotations

from .errors import SpecError
from .specs import GPUSpec

_A100_FIT = (
    "fitted to NAR21 Tables 1-2 by a grid over (eta_max, d_half, HBM fraction, overlap "
    "interference, link fraction): 0.70, 64, 0.8, 0.2, 0.8 (validation/published.py)"
)
_HOPPER = "assumed: A100 shape model scaled to published H100 cuBLAS bf16 throughput"
# One set of efficiency constants per GPU family (the physics of the family's kernels; no
# per-entry or per-row tuning). Attention: eta_max of compute.attention_efficiency, from the
# long-sequence FlashAttention throughput divided by the s/(s+512) * d/(d+32) shape factor at
# 16K keys and head dim 128 (0.78):
# - Ampere: FlashAttention-2 ~190 of 312 TFLOP/s causal fwd (Dao 2023 fig. 5): 0.61/0.78;
#   SDPA's flash backend is the same kernel.
# - Hopper: FlashAttention-3 / cuDNN ~640 of 989 (Shah et al. 2024 fig. 7, causal hdim 128):
#   0.65/0.78 = 0.83; FlashAttention-2 on H100 ~35% of peak at best (ibid. §1: "only 35%
#   utilization"), 0.45 by the same rule; 0.40 is used, calibrated on the long-sequence
#   torchtitan rows (32K, 256K) of validation/published_modern.py (31% of peak at 16K keys).
# - Blackwell: cuDNN / FlashAttention-4-class ~1600 of 2250 TFLOP/s on B200 (cuDNN 9 release
#   notes, Dao-AILab flash-attention cute DSL benchmarks): 0.71/0.78; FlashAttention-2 (SDPA)
#   on Blackwell assumed at the Hopper fraction. CDNA: assumed (no calibration rows).
# GEMMs: eta_max, d_half of compute.gemm_efficiency (Ampere fitted; Hopper/Blackwell the assumed
# values, checked, not refitted, on the dense rows of validation/published_modern.py);
# fp8_gemm_ratio 0.9 from NVIDIA's cuBLASLt fp8 vs bf16 throughput (compute.py docstring).
_AMPERE = dict(gemm_max_efficiency=0.70, gemm_half_dim=64.0, attention_efficiency=0.78,
               sdpa_attention_efficiency=0.78)
_HOPPER_EFF = dict(gemm_max_efficiency=0.62, gemm_half_dim=128.0, attention_efficiency=0.83,
                   sdpa_attention_efficiency=0.40, fp8_gemm_ratio=0.9)
_BLACKWELL_EFF = dict(gemm_max_efficiency=0.60, gemm_half_dim=192.0, attention_efficiency=0.90,
                      sdpa_attention_efficiency=0.40, fp8_gemm_ratio=0.9)
_CDNA_EFF = dict(gemm_max_efficiency=0.48, gemm_half_dim=192.0, attention_efficiency=0.55,
                 sdpa_attention_efficiency=0.45)
# Architecture (not fitted): Blackwell data-centre parts (sm 10.x) run FP8 GEMMs in non-TN
# layouts, so Transformer Engine backs an FP8 weight's row- and column-wise use with one
# buffer (transformer_engine/pytorch/utils.py is_non_tn_fp8_gemm_supported: sm 10.0-11.x
# and >= 13.0; tensor/float8_tensor.py inner_tensor_specs, NVIDIA/TransformerEngine
# @d0067d0da6cb). Hopper, Ada and the rest keep a transposed copy (GPUSpec.fp8_gemm_tn_only).
_BLACKWELL_ARCH = dict(fp8_gemm_tn_only=False)
# New entries inherit the constants of their family's fitted/assumed member, and say so.
_INHERIT_HOPPER = "inherits the Hopper family constants of h100-sxm (0.62, 128): " + _HOPPER
_INHERIT_BLACKWELL = "inherits the Blackwell family constants of b200 (0.60, 192): assumed: Hopper shape model, larger tiles"
_INHERIT_CDNA = (
    "inherits the CDNA family constants of mi300x (0.48, 192): assumed: public MI300X bf16 GEMM benchmarks "
    "reach ~600-700 of 1307 TFLOP/s"
)

CATALOG: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec(
            name="a100-40gb",
            description="NVIDIA A100 SXM4 40GB",
            memory_gib=39.4,
            peak_tflops={"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "fp8": 312.0},
            hbm_gb_s=1555.0,
            nvlink_gb_s=300.0,
            network_gb_s=25.0,
            gpus_per_node=8,
            source="NVIDIA A100 Tensor Core GPU datasheet (2021); NVLink3 600 GB/s bidirectional; fp8 not supported, runs at bf16 rate",
            **_AMPERE,
            efficiency_source=_A100_FIT,
        ),
        GPUSpec(
            name="a100-80gb",
            description="NVIDIA A100 SXM4 80GB",
            memory_gib=79.2,
            peak_tflops={"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "fp8": 312.0},
            hbm_gb_s=2039.0,
            nvlink_gb_s=300.0,
            network_gb_s=25.0,
            gpus_per_node=8,
            source="NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4 80GB; NVLink3 600 GB/s bidirectional; DGX A100: 8x200 Gb/s HDR IB",
            **_AMPERE,
            efficiency_source=_A100_FIT,
        ),
        GPUSpec(
            name="h100-sxm",
            description="NVIDIA H100 SXM5 80GB",
            memory_gib=79.1,
            peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
            hbm_gb_s=3350.0,
            nvlink_gb_s=450.0,
            network_gb_s=50.0,
            gpus_per_node=8,
            source="NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5; NVLink4 900 GB/s bidirectional; DGX H100: 8x400 Gb/s NDR",
            **_HOPPER_EFF,
            efficiency_source=_HOPPER,
        ),
        GPUSpec(
            name="h200",
            description="NVIDIA H200 SXM 141GB",
            memory_gib=140.0,
            peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
            hbm_gb_s=4800.0,
            nvlink_gb_s=450.0,
            network_gb_s=50.0,
            gpus_per_node=8,
            source="NVIDIA H200 Tensor Core GPU datasheet (2024); NVLink4 900 GB/s bidirectional; 400 Gb/s NDR per GPU",
            **_HOPPER_EFF,
            efficiency_source=_HOPPER,
        ),
        GPUSpec(
            name="b200",
            description="NVIDIA B200 180GB (HGX B200)",
            memory_gib=178.0,
            peak_tflops={"fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
            hbm_gb_s=7700.0,
            nvlink_gb_s=900.0,
            network_gb_s=50.0,
            gpus_per_node=8,
            source="NVIDIA HGX B200 datasheet (2025): dense = half the sparse figures; NVLink5 1.8 TB/s bidirectional; ConnectX-7 400 Gb/s per GPU",
            **_BLACKWELL_EFF,
            **_BLACKWELL_ARCH,
            efficiency_source="assumed: Hopper shape model, larger tiles",
        ),
        GPUSpec(
            name="mi300x",
            description="AMD Instinct MI300X 192GB",
            memory_gib=191.5,
            peak_tflops={"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
            hbm_gb_s=5300.0,
            nvlink_gb_s=64.0,
            network_gb_s=50.0,
            gpus_per_node=8,
            source="AMD Instinct MI300X datasheet (2023); Infinity Fabric 64 GB/s per link per direction to each peer (7 links); 400 Gb/s per GPU",
            **_CDNA_EFF,
            efficiency_source="assumed: public MI300X bf16 GEMM benchmarks reach ~600-700 of 1307 TFLOP/s",
        ),
        GPUSpec(
            name="gb200",
            description="NVIDIA GB200 (one Blackwell GPU of a GB200 NVL72 rack, 1200 W)",
            memory_gib=185.0,
            peak_tflops={"fp32": 90.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0},
            hbm_gb_s=8000.0,
            nvlink_gb_s=900.0,
            network_gb_s=50.0,
            gpus_per_node=4,
            source=(
                "NVIDIA GB200 NVL72 datasheet and Blackwell architecture technical brief (2024): per GPU 5/10 PFLOP/s "
                "dense fp8/fp4 (half the sparse figures), 2.5 PFLOP/s bf16, 8 TB/s HBM3e (576 TB/s per 72); capacity "
                "189471 MiB as reported by the driver (MLPerf Training systems json); NVLink5 1.8 TB/s bidirectional "
                "to the NVLink Switch, 72 GPUs per NVLink domain; 4 GPUs per compute tray (2 superchips); "
                "ConnectX-7 400 Gb/s per GPU"
            ),
            **_BLACKWELL_EFF,
            **_BLACKWELL_ARCH,
            efficiency_source=_INHERIT_BLACKWELL,
            nvlink_domain=72,
        ),
        GPUSpec(
            name="b300",
            description="NVIDIA B300 (HGX B300, Blackwell Ultra)",
            memory_gib=268.0,
            peak_tflops={"fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
            hbm_gb_s=7700.0,
            nvlink_gb_s=900.0,
            network_gb_s=100.0,
            gpus_per_node=8,
            source=(
                "NVIDIA HGX B300 datasheet (2025): per GPU 4.5 PFLOP/s dense fp8, 2.25 bf16, 1.1 tf32, 75 TFLOP/s "
                "fp32; 270 GB HBM3e, 7.7 TB/s; NVLink5 1.8 TB/s bidirectional; ConnectX-8 800 Gb/s per GPU. "
                "Capacity: 270 GB less the ~1% the driver reserves (as the b200 entry); not measured"
            ),
            **_BLACKWELL_EFF,
            **_BLACKWELL_ARCH,
            efficiency_source=_INHERIT_BLACKWELL,
        ),
        GPUSpec(
            name="gb300",
            description="NVIDIA GB300 (one Blackwell Ultra GPU of a GB300 NVL72 rack, 1400 W)",
            memory_gib=277.0,
            peak_tflops={"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0},
            hbm_gb_s=8000.0,
            nvlink_gb_s=900.0,
            network_gb_s=100.0,
            gpus_per_node=4,
            source=(
                "NVIDIA GB300 NVL72 datasheet (2025): per GPU 5 PFLOP/s dense fp8, 2.5 bf16, 1.25 tf32 (rack: 360 "
                "PFLOP/s fp8 dense / 72); 279 GB HBM3e, 8 TB/s; NVLink5 1.8 TB/s bidirectional, 72 GPUs per NVLink "
                "domain; ConnectX-8 800 Gb/s per GPU. Capacity: 279 GB less ~1% reserved; not measured"
            ),
            **_BLACKWELL_EFF,
            **_BLACKWELL_ARCH,
            efficiency_source=_INHERIT_BLACKWELL,
            nvlink_domain=72,
        ),
        GPUSpec(
            name="h800",
            description="NVIDIA H800 SXM5 80GB (export variant of H100 SXM)",
            memory_gib=79.1,
            peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
            hbm_gb_s=3350.0,
            nvlink_gb_s=200.0,
            network_gb_s=50.0,
            gpus_per_node=8,
            source=(
                "NVIDIA H800 SXM5 datasheet (2023): H100 SXM5 compute (FP64 reduced to 1 TFLOP/s), 80 GB HBM3 "
                "3.35 TB/s, NVLink 400 GB/s bidirectional (8 of the H100's 18 links); 8x400 Gb/s IB per node as in "
                "DeepSeek-V3 (arXiv 2412.19437 sec. 3.2.2, which measures ~160 GB/s achievable NVLink)"
            ),
            **_HOPPER_EFF,
            efficiency_source=_INHERIT_HOPPER,
        ),
        GPUSpec(
            name="h20",
            description="NVIDIA H20 96GB (export Hopper, 400 W)",
            memory_gib=95.0,
            peak_tflops={"fp32": 44.0, "tf32": 74.0, "bf16": 148.0, "fp16": 148.0, "fp8": 296.0},
            hbm_gb_s=4000.0,
            nvlink_gb_s=450.0,
            network_gb_s=50.0,
            gpus_per_node=8,
            source=(
                "NVIDIA H20 product brief (2024): 296 TFLOP/s fp8 and 148 bf16 dense, 74 tf32, 44 fp32; 96 GB HBM3 "
                "4.0 TB/s; NVLink 900 GB/s bidirectional; 400 Gb/s per GPU assumed (HGX H20)"
            ),
            **_HOPPER_EFF,
            efficiency_source=_INHERIT_HOPPER + " (a compute-starved part: GEMMs saturate at smaller shapes; to be refitted)",
        ),
        GPUSpec(
            name="gh200",
            description="NVIDIA GH200 Grace Hopper superchip, 96 GB HBM3 (quad-GH200 nodes)",
            memory_gib=95.0,
            peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
            hbm_gb_s=4000.0,
            nvlink_gb_s=450.0,
            network_gb_s=25.0,
            gpus_per_node=4,
            source=(
                "NVIDIA GH200 Grace Hopper Superchip datasheet (2023): H100 compute, 96 GB HBM3 4 TB/s (a 144 GB "
                "HBM3e 4.9 TB/s variant exists: pass it as an object), NVLink4 900 GB/s bidirectional, NVLink-C2C "
                "900 GB/s to Grace; 4 superchips per node with one 200 Gb/s Slingshot NIC each (HPE Cray EX254n, "
                "as in CSCS Alps)"
            ),
            **_HOPPER_EFF,
            efficiency_source=_INHERIT_HOPPER,
        ),
        GPUSpec(
            name="mi325x",
            description="AMD Instinct MI325X 256GB",
            memory_gib=255.5,
            peak_tflops={"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
            hbm_gb_s=6000.0,
            nvlink_gb_s=64.0,
            network_gb_s=50.0,
            gpus_per_node=8,
            source=(
                "AMD Instinct MI325X datasheet (2024): MI300X compute (1307.4 bf16 / 2614.9 fp8 dense TFLOP/s), 256 GB "
                "HBM3E 6 TB/s; Infinity Fabric 64 GB/s per link per direction to each of 7 peers; 400 Gb/s per GPU"
            ),
            **_CDNA_EFF,
            efficiency_source=_INHERIT_CDNA,
        ),
        GPUSpec(
            name="mi355x",
            description="AMD Instinct MI355X 288GB (CDNA 4)",
            memory_gib=287.5,
            peak_tflops={"fp32": 157.3, "tf32": 157.3, "bf16": 2516.6, "fp16": 2516.6, "fp8": 5033.2},
            hbm_gb_s=8000.0,
            nvlink_gb_s=76.8,
            network_gb_s=50.0,
            gpus_per_node=8,
            source=(
                "AMD Instinct MI355X datasheet (2025): 2.5 PFLOP/s bf16, 5.0 fp8 dense, 157.3 TFLOP/s fp32 matrix (no "
                "tf32 matrix path: fp32 rate); 288 GB HBM3E 8 TB/s; Infinity Fabric 1075 GB/s aggregate over 7 links "
                "= 76.8 GB/s per link per direction; 400 Gb/s per GPU (Pollara 400)"
            ),
            **_CDNA_EFF,
            efficiency_source=_INHERIT_CDNA,
        ),
        GPUSpec(
            name="l40s",
            description="NVIDIA L40S 48GB (PCIe)",
            memory_gib=44.4,
            peak_tflops={"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
            hbm_gb_s=864.0,
            nvlink_gb_s=32.0,
            network_gb_s=25.0,
            gpus_per_node=8,
            source="NVIDIA L40S datasheet (2023): no NVLink, PCIe Gen4 x16 64 GB/s bidirectional",
            gemm_max_efficiency=0.65,
            efficiency_source="assumed: A100 shape model",
        ),
        GPUSpec(
            name="v100-32gb",
            description="NVIDIA V100 SXM2 32GB",
            memory_gib=31.7,
            peak_tflops={"fp32": 15.7, "tf32": 15.7, "bf16": 15.7, "fp16": 125.0, "fp8": 125.0},
            hbm_gb_s=900.0,
            nvlink_gb_s=150.0,
            network_gb_s=12.5,
            gpus_per_node=8,
            source="NVIDIA V100 datasheet (2018), SXM2; NVLink2 300 GB/s bidirectional; no bf16 tensor cores (bf16 at fp32 rate); DGX-1/2: 100 Gb/s per GPU",
            gemm_max_efficiency=0.70,
            efficiency_source="assumed: A100 shape model",
        ),
        GPUSpec(
            name="cpu",
            description="a CPU process as the device (gloo); refine with a CPU profile",
            memory_gib=16.0,
            peak_tflops={"fp32": 0.1, "tf32": 0.1, "bf16": 0.05, "fp16": 0.02, "fp8": 0.02},
            hbm_gb_s=10.0,
            nvlink_gb_s=2.0,
            network_gb_s=1.0,
            gpus_per_node=2,
            source="assumed: one modern x86 core with AVX2/AVX-512 FMA (~100 GFLOP/s fp32), a share of DDR bandwidth; loopback gloo",
            gemm_max_efficiency=0.5,
            gemm_half_dim=32.0,
            memory_bound_efficiency=0.5,
            reserved_gib=0.2,
            kernel_overhead_s=2e-5,
            intra_node_latency_s=5e-5,
            inter_node_latency_s=1e-4,
            link_efficiency=0.5,
            # gloo runs collectives on the same cores as compute: nothing hides behind it
            overlap_interference=1.0,
            # SDPA on a CPU is a blocked GEMM loop, without the GPU kernels' tile ramp-up
            attention_half_seq=0.0,
            attention_half_head_dim=0.0,
            attention_bwd_ratio=1.0,
            efficiency_source="assumed; `planner profile` on the machine replaces it",
            host=True,
        ),
    )
}


def get_gpu(name: str) -> GPUSpec:
    key = name.strip().lower()
    if key not in CATALOG:
        raise SpecError("cluster.gpu", f"unknown GPU {name!r}", allowed=sorted(CATALOG))
    return CATALOG[key]


DEFAULT_GPUS_PER_NODE = 8  # an HGX / DGX board, when a request's own GPU does not say

# fields a GPU object must give when it names no catalog `base` to start from
_REQUIRED_WITHOUT_BASE = ("memory_gib", "hbm_gb_s", "peak_tflops", "nvlink_gb_s", "network_gb_s")
_OVERRIDES = ("memory_gib", "hbm_gb_s", "nvlink_gb_s", "network_gb_s", "gpus_per_node")


def resolve_gpu(gpu: str | dict) -> GPUSpec:
    """`cluster.gpu`: a catalog name, or an object {base?, name?, memory_gib?, hbm_gb_s?,
    peak_tflops?, nvlink_gb_s?, network_gb_s?, gpus_per_node?} (already checked by
    cost_model.request.GpuOverride). With a base, the given numbers replace the base's
    (`dataclasses.replace`, peak_tflops merged per dtype); without one, the datasheet
    numbers are all required and the efficiency model keeps the GPUSpec defaults."""
    from dataclasses import replace

    from .vocab import Dtype, values

    if isinstance(gpu, str):
        return get_gpu(gpu)
    given = {k: v for k, v in gpu.items() if v is not None}
    if given.get("base") is not None:
        base = get_gpu(given["base"]) if isinstance(given["base"], str) else None
        if base is None:
            raise SpecError("cluster.gpu.base", "must be a catalog GPU name", allowed=sorted(CATALOG))
        changes = {k: given[k] for k in _OVERRIDES if k in given}
        if "peak_tflops" in given:
            changes["peak_tflops"] = {**base.peak_tflops, **given["peak_tflops"]}
        return replace(base, name=given.get("name") or f"{base.name}-custom",
                       description=f"{base.description}, with {', '.join(sorted(changes)) or 'no'} changed",
                       source=f"{base.source}; overridden by the request: {', '.join(sorted(changes)) or 'nothing'}",
                       **changes)
    missing = [k for k in _REQUIRED_WITHOUT_BASE if k not in given]
    if missing:
        raise SpecError(f"cluster.gpu.{missing[0]}", "is required for a GPU without a catalog `base`",
                        allowed=list(_REQUIRED_WITHOUT_BASE))
    absent = [d for d in values(Dtype) if d not in given["peak_tflops"]]
    if absent:
        raise SpecError("cluster.gpu.peak_tflops", f"needs a dense TFLOP/s for every dtype; missing {absent}",
                        allowed=list(values(Dtype)))
    return GPUSpec(
        name=given.get("name") or "custom",
        description="a GPU described by the request",
        memory_gib=float(given["memory_gib"]),
        peak_tflops=dict(given["peak_tflops"]),
        hbm_gb_s=float(given["hbm_gb_s"]),
        nvlink_gb_s=float(given["nvlink_gb_s"]),
        network_gb_s=float(given["network_gb_s"]),
        gpus_per_node=int(given.get("gpus_per_node") or DEFAULT_GPUS_PER_NODE),
        source="given by the request",
        efficiency_source="GPUSpec defaults (the A100 fit); profile the GPU to replace them",
    )
