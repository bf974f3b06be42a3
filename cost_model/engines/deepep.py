"""DeepEP's own configuration (deepseek-ai/DeepEP @dd758ca): the NVLink peers of a node, the
group sizes it has a dispatch/combine config for, its receive-buffer token counts, the SMs its
kernels take and NVSHMEM's heap granularity. Read by the engine rules (which groups DeepEP
runs) and by the expert-parallel cost terms (its traffic and buffers)."""

from __future__ import annotations

# DeepEP's NVLink peers per node (deepseek-ai/DeepEP @dd758ca csrc/kernels/legacy/compiled.cuh
# LEGACY_NUM_MAX_NVL_PEERS): a group larger than this spans nodes of exactly 8 GPUs
DEEPEP_NVL_PEERS = 8
# (nvl_chunked_recv_tokens, rdma_chunked_recv_tokens) of DeepEP's dispatch and combine
# configs by group size (deep_ep/buffers/legacy.py config_map @dd758ca, the RDMA count rounded
# up to a multiple of the RDMA send chunk as csrc/legacy/config.hpp Config does); the buffer is
# sized for the larger of the two. Its keys are the group sizes DeepEP has a config for (other
# sizes assert: 'Unsupported number of EP ranks')
DEEPEP_RECV_TOKENS = {
    2: ((256, 128), (256, 128)), 4: ((256, 128), (256, 128)), 8: ((256, 128), (256, 128)),
    16: ((288, 140), (288, 132)), 24: ((288, 128), (288, 128)), 32: ((288, 128), (288, 128)),
    48: ((288, 128), (288, 128)), 64: ((288, 128), (288, 128)), 96: ((480, 132), (480, 128)),
    128: ((560, 132), (560, 128)), 144: ((720, 132), (720, 128)), 160: ((720, 132), (720, 128)),
}
DEEPEP_GROUP_SIZES = tuple(DEEPEP_RECV_TOKENS)
# SMs DeepEP's kernels take (Megatron-Core moe_deepep_num_sms, default 20; megatron-core 0.16.1)
DEEPEP_NUM_SMS = 20
# NVSHMEM's symmetric heap as DeepEP sets it up for internode groups (deep_ep/buffers/legacy.py
# @dd758ca: NVSHMEM_CUMEM_GRANULARITY = 2**29; "NVSHMEM initialization requires at least 256 MiB")
DEEPEP_NVSHMEM_CHUNK_BYTES = 2**29
DEEPEP_NVSHMEM_INIT_BYTES = 2**28
