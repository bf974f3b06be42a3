"""Context-parallel communication of one block: ring attention (Liu et al. 2023; Megatron-Core
context parallel; torch's context_parallel ring for the SDPA engines) sends cp-1 exchanges of
the local K/V chunk forward and K/V + dK/dV backward, overlapped with the attention core (only
the excess is exposed); the all-gather and all-to-all variants as Megatron-Core runs them.
"""

from __future__ import annotations

from cost_model.engines import kernels
from cost_model.hardware import comm
from cost_model.model import attention
from cost_model.specs.inputs import ParallelConfig, TransformerSpec
from cost_model.specs.vocab import CP_A2A, CP_A2A_P2P, CP_ALL_GATHER
from cost_model.terms.geometry import BlockCompute, BlockGeometry, cp_kind, repeats_kv
from cost_model.terms.overlap import overlapped_s


def block_cp_s(m: TransformerSpec, cluster, cfg: ParallelConfig, geo: BlockGeometry, c: BlockCompute, fits) -> float:
    """Exposed context-parallel communication of a block, forward + backward, per variant
    (Megatron-Core --cp-comm-type, megatron/core/extensions/transformer_engine.py ->
    TE attention/context_parallel.py):
    - p2p (ring attention, Liu et al. 2023; torch context_parallel's ring): cp-1 sends of the
      local K/V chunk forward, K/V + dK/dV backward, each step under that step's attention.
      torch's ring (torch/distributed/tensor/experimental/_attention.py; torchtitan @9dec370
      rotates by all-gather, the same bytes) sends the K/V the model passes to SDPA
      (torchtitan: repeated to every query head) and rotates dK/dV in fp32 (convert_to_f32);
    - all_gather (Llama 3 §3.3.2): all-gather of K/V forward, again in backward plus a
      reduce-scatter of dK/dV, all exposed: Transformer Engine gathers and reduce-scatters
      synchronously around the two attention steps (AttnFuncWithCPAndKVAllGather, "KV
      all-gather between CP ranks is exposed", transformer_engine/pytorch/attention/
      dot_product_attention/context_parallel.py @015d22571b);
    - a2a (DeepSpeed-Ulysses, Jacobs et al. 2023): all-to-all of q, k, v in and of the
      output back, the same four in backward, not overlapped;
    - a2a+p2p: the all-to-all inside the inner group, the ring across the rest.
    K/V bytes: attention.kv_elems_per_token (MLA passes the up-projected K and V)."""
    cp, tp = cfg.cp, cfg.tp
    if cp <= 1:
        return 0.0
    gamma = cluster.gpu.overlap_interference
    kv_bytes = geo.act_dt * geo.tokens * attention.kv_elems_per_token(m) / tp
    q_o_bytes = geo.act_dt * geo.tokens * m.num_attention_heads * (attention.qk_head_dim(m) + attention.v_head_dim(m)) / tp
    kind = cp_kind(cfg)
    # torch's ring wraps the SDPA call, so it moves the K/V the model passes to it (repeated
    # to every query head in torchtitan) and returns dK/dV in fp32 (convert_to_f32, the dkv
    # rotater of _templated_ring_attention_backward); Transformer Engine's ring moves the
    # GQA-width K/V and dK/dV in the activation dtype
    torch_ring = geo.kernels.attention == kernels.ATTN_SDPA
    ring_kv_bytes = geo.act_dt * geo.tokens * attention.kv_elems_per_token(m, torch_ring and repeats_kv(geo)) / tp
    dkv_ratio = attention.FP32_BYTES / geo.act_dt if torch_ring else 1.0

    def ring(size: int, stride: int, chunk_bytes: float) -> float:
        link = comm.group_link(cluster, size, stride)
        fwd = (size - 1) * comm.send_recv_s(chunk_bytes, link, fits)
        bwd = fwd + (size - 1) * comm.send_recv_s(chunk_bytes * dkv_ratio, link, fits)
        return overlapped_s(fwd, c.core_fwd_s, gamma) + overlapped_s(bwd, c.core_bwd_s, gamma)

    def a2a(size: int, stride: int) -> float:
        link = comm.group_link(cluster, size, stride)
        return 2 * comm.all_to_all_s(kv_bytes + q_o_bytes, size, link, fits)

    if kind == CP_ALL_GATHER:
        link = comm.group_link(cluster, cp, tp)
        ag = comm.all_gather_s(kv_bytes * cp, cp, link, fits)
        rs = comm.reduce_scatter_s(kv_bytes * cp, cp, link, fits)
        return 2 * ag + rs
    if kind == CP_A2A:
        return a2a(cp, tp)
    if kind == CP_A2A_P2P:
        inner, outer = attention.a2a_p2p_sizes(m, tp, cp)
        cost = a2a(inner, tp) if inner > 1 else 0.0
        return cost + (ring(outer, tp * inner, ring_kv_bytes * inner) if outer > 1 else 0.0)
    return ring(cp, tp, ring_kv_bytes)
