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

from dataclasses import replace

from cost_model.specs.errors import SpecError, close_match
from cost_model.specs.inputs import GPUSpec
from cost_model.specs.vocab import Dtype, values

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
# MXFP8: Blackwell's tensor cores take microscaled FP8 (one E8M0 scale per 32 elements;
# Transformer Engine runs the mxfp8 recipe on sm 10.x only, quantization.py
# _compute_mxfp8_support @d0067d0da6cb).
_BLACKWELL_ARCH = dict(fp8_gemm_tn_only=False, mxfp8=True)
# The family of each entry: the set of efficiency constants it carries (above), and the key
# its prediction intervals are bucketed by (cost_model/hardware/intervals.py). V100 and L40S
# carry assumed A100-shape constants of their own: no published rows check them.
FAMILY = {"a100-40gb": "ampere", "a100-80gb": "ampere", "h100-sxm": "hopper", "h200": "hopper", "h800": "hopper",
          "h20": "hopper", "gh200": "hopper", "b200": "blackwell", "b300": "blackwell", "gb200": "blackwell",
          "gb300": "blackwell", "mi300x": "cdna", "mi325x": "cdna", "mi355x": "cdna", "l40s": "ada",
          "v100-32gb": "volta", "cpu": "cpu"}
# New entries inherit the constants of their family's fitted/assumed member, and say so.
# Host issue (GPUSpec.host_op_s, moe.host_issue_s): CPU seconds per counted kernel of a
# host-synchronised MoE layer, Python and framework overhead included; one value for the
# x86 hosts of DGX/HGX systems and the Grace hosts of GB200/GB300 alike (no row separates
# them). Fitted on the two MoE rows of validation/published_runs_bridge.csv that run host-bound
# at the published degrees (DGX B200, MBS 1, 16 local experts, MXFP8; Megatron-Bridge 26.02);
# the fit and its errors are in docs/results.md "Fitted constants". Those rows graph-capture
# the router and preprocessing (scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py @69a733e55 cuda_graph_scope), which the emitted launch does
# not, so the fit is, if anything, low for it.
HOST_OP_S = 3.7e-5
# DeepEP (the `deepep` MoE dispatcher, GPUSpec.deepep): deepseek-ai/DeepEP README @dd758ca
# runs on Ampere (sm80) and Hopper (sm90) with NVLink inside the node and RDMA (InfiniBand /
# RoCE, NVSHMEM IBGDA) between nodes, 8 NVLink peers per node (csrc/kernels/legacy/compiled.cuh
# LEGACY_NUM_MAX_NVL_PEERS); Megatron-Bridge applies it on "Ampere, Hopper, and Blackwell (only
# B200 and B300)" and not on GB200/GB300 NVL72 racks (src/megatron/bridge/training/
# flex_dispatcher_backend.py @c0b9a0003; Megatron-Core: "only hybridep backend supports the MNNVL
# case", transformer_config.py moe_flex_dispatcher_backend, megatron-core 0.16.1). Set on the
# DGX/HGX entries of those families; not on GB200/GB300 (NVL72), GH200 (Slingshot, 4 per node),
# L40S (no NVLink), V100 (sm70) or the AMD parts.
_INHERIT_HOPPER = "inherits the Hopper family constants of h100-sxm (0.62, 128): " + _HOPPER
_INHERIT_BLACKWELL = "inherits the Blackwell family constants of b200 (0.60, 192): assumed: Hopper shape model, larger tiles"
_INHERIT_CDNA = (
    "inherits the CDNA family constants of mi300x (0.48, 192): assumed: public MI300X bf16 GEMM benchmarks "
    "reach ~600-700 of 1307 TFLOP/s"
)



def _gpu(name: str, description: str, memory_gib: float, peak_tflops: tuple[float, ...], hbm_gb_s: float,
         nvlink_gb_s: float, network_gb_s: float, gpus_per_node: int, source: str, **efficiency) -> GPUSpec:
    """One catalog entry: the datasheet numbers in GPUSpec's field order, the dense peaks in
    `vocab.Dtype` order (fp32, tf32, bf16, fp16, fp8), then the efficiency-model constants."""
    peaks = dict(zip(values(Dtype), peak_tflops, strict=True))
    efficiency.setdefault("host_op_s", HOST_OP_S)
    return GPUSpec(name, description, memory_gib, peaks, hbm_gb_s, nvlink_gb_s, network_gb_s, gpus_per_node,
                   source, **efficiency)


# _gpu(name, description, memory_gib, peak TFLOP/s (fp32, tf32, bf16, fp16, fp8),
#      hbm_gb_s, nvlink_gb_s, network_gb_s, gpus_per_node, source, efficiency constants...)
CATALOG: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        _gpu("a100-40gb", "NVIDIA A100 SXM4 40GB", 39.4, (19.5, 156.0, 312.0, 312.0, 312.0),
             1555.0, 300.0, 25.0, 8,
             "NVIDIA A100 Tensor Core GPU datasheet (2021); NVLink3 600 GB/s bidirectional; no fp8 tensor cores (sm 8.0)",
             **_AMPERE, efficiency_source=_A100_FIT, deepep=True, fp8=False),
        _gpu("a100-80gb", "NVIDIA A100 SXM4 80GB", 79.2, (19.5, 156.0, 312.0, 312.0, 312.0),
             2039.0, 300.0, 25.0, 8,
             "NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4 80GB; NVLink3 600 GB/s bidirectional; DGX A100: 8x200 Gb/s HDR IB",
             **_AMPERE, efficiency_source=_A100_FIT, deepep=True, fp8=False),
        _gpu("h100-sxm", "NVIDIA H100 SXM5 80GB", 79.1, (67.0, 494.7, 989.4, 989.4, 1978.9),
             3350.0, 450.0, 50.0, 8,
             "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM5; NVLink4 900 GB/s bidirectional; DGX H100: 8x400 Gb/s NDR",
             **_HOPPER_EFF, efficiency_source=_HOPPER, deepep=True),
        _gpu("h200", "NVIDIA H200 SXM 141GB", 140.0, (67.0, 494.7, 989.4, 989.4, 1978.9),
             4800.0, 450.0, 50.0, 8,
             "NVIDIA H200 Tensor Core GPU datasheet (2024); NVLink4 900 GB/s bidirectional; 400 Gb/s NDR per GPU",
             **_HOPPER_EFF, efficiency_source=_HOPPER, deepep=True),
        _gpu("b200", "NVIDIA B200 180GB (HGX B200)", 178.0, (75.0, 1100.0, 2250.0, 2250.0, 4500.0),
             7700.0, 900.0, 50.0, 8,
             "NVIDIA HGX B200 datasheet (2025): dense = half the sparse figures; NVLink5 1.8 TB/s bidirectional; ConnectX-7 400 Gb/s per GPU",
             **_BLACKWELL_EFF, **_BLACKWELL_ARCH, efficiency_source="assumed: Hopper shape model, larger tiles", deepep=True),
        _gpu("mi300x", "AMD Instinct MI300X 192GB", 191.5, (163.4, 653.7, 1307.4, 1307.4, 2614.9),
             5300.0, 64.0, 50.0, 8,
             "AMD Instinct MI300X datasheet (2023); Infinity Fabric 64 GB/s per link per direction to each peer (7 links); 400 Gb/s per GPU",
             **_CDNA_EFF,
             efficiency_source="assumed: public MI300X bf16 GEMM benchmarks reach ~600-700 of 1307 TFLOP/s"),
        _gpu("gb200", "NVIDIA GB200 (one Blackwell GPU of a GB200 NVL72 rack, 1200 W)", 185.0, (90.0, 1250.0, 2500.0, 2500.0, 5000.0),
             8000.0, 900.0, 50.0, 4,
             "NVIDIA GB200 NVL72 datasheet and Blackwell architecture technical brief (2024): per GPU 5/10 PFLOP/s "
             "dense fp8/fp4 (half the sparse figures), 2.5 PFLOP/s bf16, 8 TB/s HBM3e (576 TB/s per 72); capacity "
             "189471 MiB as reported by the driver (MLPerf Training systems json); NVLink5 1.8 TB/s bidirectional "
             "to the NVLink Switch, 72 GPUs per NVLink domain; 4 GPUs per compute tray (2 superchips); "
             "ConnectX-7 400 Gb/s per GPU",
             **_BLACKWELL_EFF, **_BLACKWELL_ARCH, efficiency_source=_INHERIT_BLACKWELL, nvlink_domain=72),
        _gpu("b300", "NVIDIA B300 (HGX B300, Blackwell Ultra)", 268.0, (75.0, 1100.0, 2250.0, 2250.0, 4500.0),
             7700.0, 900.0, 100.0, 8,
             "NVIDIA HGX B300 datasheet (2025): per GPU 4.5 PFLOP/s dense fp8, 2.25 bf16, 1.1 tf32, 75 TFLOP/s "
             "fp32; 270 GB HBM3e, 7.7 TB/s; NVLink5 1.8 TB/s bidirectional; ConnectX-8 800 Gb/s per GPU. "
             "Capacity: 270 GB less the ~1% the driver reserves (as the b200 entry); not measured",
             **_BLACKWELL_EFF, **_BLACKWELL_ARCH, efficiency_source=_INHERIT_BLACKWELL, deepep=True),
        _gpu("gb300", "NVIDIA GB300 (one Blackwell Ultra GPU of a GB300 NVL72 rack, 1400 W)", 277.0, (80.0, 1250.0, 2500.0, 2500.0, 5000.0),
             8000.0, 900.0, 100.0, 4,
             "NVIDIA GB300 NVL72 datasheet (2025): per GPU 5 PFLOP/s dense fp8, 2.5 bf16, 1.25 tf32 (rack: 360 "
             "PFLOP/s fp8 dense / 72); 279 GB HBM3e, 8 TB/s; NVLink5 1.8 TB/s bidirectional, 72 GPUs per NVLink "
             "domain; ConnectX-8 800 Gb/s per GPU. Capacity: 279 GB less ~1% reserved; not measured",
             **_BLACKWELL_EFF, **_BLACKWELL_ARCH, efficiency_source=_INHERIT_BLACKWELL, nvlink_domain=72),
        _gpu("h800", "NVIDIA H800 SXM5 80GB (export variant of H100 SXM)", 79.1, (67.0, 494.7, 989.4, 989.4, 1978.9),
             3350.0, 200.0, 50.0, 8,
             "NVIDIA H800 SXM5 datasheet (2023): H100 SXM5 compute (FP64 reduced to 1 TFLOP/s), 80 GB HBM3 "
             "3.35 TB/s, NVLink 400 GB/s bidirectional (8 of the H100's 18 links); 8x400 Gb/s IB per node as in "
             "DeepSeek-V3 (arXiv 2412.19437 sec. 3.2.2, which measures ~160 GB/s achievable NVLink)",
             **_HOPPER_EFF, efficiency_source=_INHERIT_HOPPER, deepep=True),
        _gpu("h20", "NVIDIA H20 96GB (export Hopper, 400 W)", 95.0, (44.0, 74.0, 148.0, 148.0, 296.0),
             4000.0, 450.0, 50.0, 8,
             "NVIDIA H20 product brief (2024): 296 TFLOP/s fp8 and 148 bf16 dense, 74 tf32, 44 fp32; 96 GB HBM3 "
             "4.0 TB/s; NVLink 900 GB/s bidirectional; 400 Gb/s per GPU assumed (HGX H20)",
             **_HOPPER_EFF,
             efficiency_source=_INHERIT_HOPPER + " (a compute-starved part: GEMMs saturate at smaller shapes; to be refitted)", deepep=True),
        _gpu("gh200", "NVIDIA GH200 Grace Hopper superchip, 96 GB HBM3 (quad-GH200 nodes)", 95.0, (67.0, 494.7, 989.4, 989.4, 1978.9),
             4000.0, 450.0, 25.0, 4,
             "NVIDIA GH200 Grace Hopper Superchip datasheet (2023): H100 compute, 96 GB HBM3 4 TB/s (a 144 GB "
             "HBM3e 4.9 TB/s variant exists: pass it as an object), NVLink4 900 GB/s bidirectional, NVLink-C2C "
             "900 GB/s to Grace; 4 superchips per node with one 200 Gb/s Slingshot NIC each (HPE Cray EX254n, "
             "as in CSCS Alps)",
             **_HOPPER_EFF, efficiency_source=_INHERIT_HOPPER),
        _gpu("mi325x", "AMD Instinct MI325X 256GB", 255.5, (163.4, 653.7, 1307.4, 1307.4, 2614.9),
             6000.0, 64.0, 50.0, 8,
             "AMD Instinct MI325X datasheet (2024): MI300X compute (1307.4 bf16 / 2614.9 fp8 dense TFLOP/s), 256 GB "
             "HBM3E 6 TB/s; Infinity Fabric 64 GB/s per link per direction to each of 7 peers; 400 Gb/s per GPU",
             **_CDNA_EFF, efficiency_source=_INHERIT_CDNA),
        _gpu("mi355x", "AMD Instinct MI355X 288GB (CDNA 4)", 287.5, (157.3, 157.3, 2516.6, 2516.6, 5033.2),
             8000.0, 76.8, 50.0, 8,
             "AMD Instinct MI355X datasheet (2025): 2.5 PFLOP/s bf16, 5.0 fp8 dense, 157.3 TFLOP/s fp32 matrix (no "
             "tf32 matrix path: fp32 rate); 288 GB HBM3E 8 TB/s; Infinity Fabric 1075 GB/s aggregate over 7 links "
             "= 76.8 GB/s per link per direction; 400 Gb/s per GPU (Pollara 400)",
             **_CDNA_EFF, efficiency_source=_INHERIT_CDNA),
        _gpu("l40s", "NVIDIA L40S 48GB (PCIe)", 44.4, (91.6, 183.0, 362.05, 362.05, 733.0),
             864.0, 32.0, 25.0, 8,
             "NVIDIA L40S datasheet (2023): no NVLink, PCIe Gen4 x16 64 GB/s bidirectional",
             gemm_max_efficiency=0.65, efficiency_source="assumed: A100 shape model"),
        _gpu("v100-32gb", "NVIDIA V100 SXM2 32GB", 31.7, (15.7, 15.7, 15.7, 125.0, 125.0),
             900.0, 150.0, 12.5, 8,
             "NVIDIA V100 datasheet (2018), SXM2; NVLink2 300 GB/s bidirectional; no bf16 tensor cores (bf16 at fp32 rate); DGX-1/2: 100 Gb/s per GPU",
             gemm_max_efficiency=0.70, efficiency_source="assumed: A100 shape model", fp8=False),
        _gpu("cpu", "a CPU process as the device (gloo); refine with a CPU profile", 16.0, (0.1, 0.1, 0.05, 0.02, 0.02),
             10.0, 2.0, 1.0, 2,
             "assumed: one modern x86 core with AVX2/AVX-512 FMA (~100 GFLOP/s fp32), a share of DDR bandwidth; loopback gloo",
             gemm_max_efficiency=0.5, gemm_half_dim=32.0, memory_bound_efficiency=0.5,
             reserved_gib=0.2, kernel_overhead_s=2e-5, intra_node_latency_s=5e-5,
             inter_node_latency_s=1e-4, link_efficiency=0.5,
             # gloo runs collectives on the same cores as compute: nothing hides behind it
             overlap_interference=1.0,
             # SDPA on a CPU is a blocked GEMM loop, without the GPU kernels' tile ramp-up
             attention_half_seq=0.0, attention_half_head_dim=0.0, attention_bwd_ratio=1.0,
             efficiency_source="assumed; `planner profile` on the machine replaces it", host=True,
             host_op_s=0.0),  # the CPU runs its kernels as it issues them: no separate host floor
    )
}


# The host side of each system (GPUSpec.host_*; terms/offload.py prices offloading with it):
# (host link GB/s per GPU per direction, host memory GB per node, host DRAM GB/s per node,
# source). Link: PCIe x16 at 128b/130b encoding (PCI-SIG base specifications): Gen3 8 GT/s
# ~16 GB/s, Gen4 16 GT/s ~32 GB/s, Gen5 32 GT/s ~63 GB/s per direction; NVLink-C2C 900 GB/s
# bidirectional between Grace and its Hopper/Blackwell GPUs (GH200 / GB200 datasheets). DRAM:
# channels x transfer rate x 8 bytes, per socket, summed over the node's sockets.
_PCIE3_GB_S, _PCIE4_GB_S, _PCIE5_GB_S = 15.75, 31.5, 63.0
_DGX_H100_HOST = (_PCIE5_GB_S, 2048.0, 614.4,
                  "DGX H100/H200 datasheets: 2 TB system memory, 2x Xeon Platinum 8480C (8 channels DDR5-4800 = "
                  "307.2 GB/s each); each GPU on a PCIe Gen5 x16 link")
_GRACE_HOST = (225.0, 960.0, 1024.0,
               "GB200/GB300 NVL72 datasheets: one Grace (480 GB LPDDR5X, up to 512 GB/s) per two GPUs, NVLink-C2C "
               "900 GB/s bidirectional shared by the two (225 GB/s per GPU per direction); a 4-GPU tray holds two")
_HOST: dict[str, tuple[float, float, float, str]] = {
    "a100-40gb": (_PCIE4_GB_S, 1024.0, 409.6, "DGX A100 320GB user guide: 1 TB, 2x AMD EPYC 7742 (8 channels "
                                              "DDR4-3200 = 204.8 GB/s each); GPUs on PCIe Gen4 x16"),
    "a100-80gb": (_PCIE4_GB_S, 2048.0, 409.6, "DGX A100 640GB user guide: 2 TB, 2x AMD EPYC 7742 (8 channels "
                                              "DDR4-3200 = 204.8 GB/s each); GPUs on PCIe Gen4 x16"),
    "h100-sxm": _DGX_H100_HOST,
    "h200": _DGX_H100_HOST,
    "h800": (*_DGX_H100_HOST[:3], "assumed: an HGX H800 host as DGX H100's. " + _DGX_H100_HOST[3]),
    "h20": (*_DGX_H100_HOST[:3], "assumed: an HGX H20 host as DGX H100's. " + _DGX_H100_HOST[3]),
    "b200": (_PCIE5_GB_S, 2048.0, 716.8, "DGX B200 datasheet: 2 TB (up to 4 TB), 2x Xeon Platinum 8570 (8 "
                                         "channels DDR5-5600 = 358.4 GB/s each); GPUs on PCIe Gen5 x16"),
    "b300": (_PCIE5_GB_S, 2048.0, 716.8, "assumed: an HGX B300 host as DGX B200's (2 TB, 2 sockets DDR5-5600, "
                                         "PCIe Gen5 x16 per GPU)"),
    "gb200": _GRACE_HOST,
    "gb300": _GRACE_HOST,
    "gh200": (450.0, 1920.0, 2048.0, "GH200 datasheet: NVLink-C2C 900 GB/s bidirectional to its Grace (480 GB "
                                     "LPDDR5X, up to 512 GB/s); 4 superchips per node"),
    "mi300x": (_PCIE5_GB_S, 2048.0, 614.4, "assumed: an 8-GPU OAM server with 2x Xeon Platinum 8480+ (8 "
                                           "channels DDR5-4800 each), 2 TB; MI300X datasheet: PCIe Gen5 x16 host link"),
    "mi325x": (_PCIE5_GB_S, 2048.0, 614.4, "assumed as mi300x's server; MI325X datasheet: PCIe Gen5 x16"),
    "mi355x": (_PCIE5_GB_S, 2048.0, 614.4, "assumed as mi300x's server; MI355X datasheet: PCIe Gen5 x16"),
    "l40s": (_PCIE4_GB_S, 1024.0, 614.4, "L40S datasheet: PCIe Gen4 x16; assumed host: 2 sockets DDR5-4800 "
                                         "(8 channels each), 1 TB"),
    "v100-32gb": (_PCIE3_GB_S, 1536.0, 256.0, "DGX-2 datasheet: 1.5 TB, 2x Xeon Platinum 8168 (6 channels "
                                              "DDR4-2666 = 128 GB/s each); GPUs on PCIe Gen3 x16"),
}
# The fraction of the node's DRAM bandwidth a streaming CPU optimizer step reaches (every
# GPU's CPU-Adam at once over both sockets). Assumed, not fitted: CPU-Adam (Ren et al. 2021,
# ZeRO-Offload, USENIX ATC §5.1: SIMD, loop unrolling, OpenMP over the cores) is a streaming
# update bound by memory bandwidth, and a two-socket STREAM triad reaches ~70-80% of the
# channels' peak; NUMA crossings and the DMA traffic of the links beside it leave less.
HOST_MEMORY_EFFICIENCY = 0.5
CATALOG = {
    name: replace(g, host_link_gb_s=_HOST[name][0], host_memory_gb=_HOST[name][1], host_dram_gb_s=_HOST[name][2],
                  host_memory_efficiency=HOST_MEMORY_EFFICIENCY, host_source=_HOST[name][3])
    if name in _HOST else g
    for name, g in CATALOG.items()
}


def get_gpu(name: str) -> GPUSpec:
    key = name.strip().lower()
    if key not in CATALOG:
        raise SpecError("cluster.gpu", f"unknown GPU {name!r}", allowed=sorted(CATALOG), suggestion=close_match(name, CATALOG))
    return CATALOG[key]


DEFAULT_GPUS_PER_NODE = 8  # an HGX / DGX board, when a request's own GPU does not say

# fields a GPU object must give when it names no catalog `base` to start from
_REQUIRED_WITHOUT_BASE = ("memory_gib", "hbm_gb_s", "peak_tflops", "nvlink_gb_s", "network_gb_s")
_OVERRIDES = ("memory_gib", "hbm_gb_s", "nvlink_gb_s", "network_gb_s", "gpus_per_node")


def resolve_gpu(gpu: str | dict) -> GPUSpec:
    """`cluster.gpu`: a catalog name, or an object {base?, name?, memory_gib?, hbm_gb_s?,
    peak_tflops?, nvlink_gb_s?, network_gb_s?, gpus_per_node?} (already checked by
    planner.request.schema.GpuOverride). With a base, the given numbers replace the base's
    (`dataclasses.replace`, peak_tflops merged per dtype); without one, the datasheet
    numbers are all required and the efficiency model keeps the GPUSpec defaults."""
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
        host_op_s=HOST_OP_S,
        efficiency_source="GPUSpec defaults (the A100 fit); profile the GPU to replace them",
    )
