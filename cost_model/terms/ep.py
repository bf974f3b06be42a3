"""Expert-parallel communication of one MoE block (DeepSeek-V3 §3.2; Megatron-Core MoE): the
all-to-all dispatch and combine of the routed tokens (terms/moe.py prices each dispatcher), and
what the overlapped 1F1B all-to-all saves.
"""

from __future__ import annotations

from cost_model.specs.inputs import ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.terms import moe
from cost_model.terms.geometry import BlockCompute, BlockGeometry


def block_ep_s(m: TransformerSpec, cluster, t: TrainingSpec, cfg: ParallelConfig, geo: BlockGeometry, fits) -> float:
    """Expert communication of an MoE block, forward + backward: the dispatch and combine
    all-to-alls over the EP group and the expert-TP gather / reduce-scatter (moe.ep_comm_fwd_s,
    Megatron-Core MoEAlltoAllTokenDispatcher), the backward moving the same volumes; not
    overlapped (Megatron's default)."""
    if not geo.moe_layer or (cfg.ep <= 1 and cfg.etp <= 1):
        return 0.0
    return 2 * moe.ep_comm_fwd_s(m, cluster, cfg, moe.layout(m, t, cfg), geo.act_dt, fits)


def combined_saving_s(cluster, cfg: ParallelConfig, geo: BlockGeometry, c: BlockCompute, tp_fwd: float,
                       tp_bwd: float, cp: float, ep_comm: float) -> float:
    """What the overlapped 1F1B all-to-all (cfg.moe_a2a_overlap, Megatron-Core
    --overlap-moe-expert-parallel-comm) saves on an MoE block's forward + backward when both
    run combined with another micro-batch's (moe.combined_saving_s; 0 otherwise). The nodes:
    mlp = the routed experts' GEMMs, forward c.experts_s, backward twice it (input and weight
    gradients, one GEMM each per forward one: Narayanan et al. SC'21 §5.1); attn = the rest
    of the block's compute with its TP and CP collectives (on the compute stream), its
    weight-gradient part the attention projections' forward time; dispatch and combine =
    half the all-to-all communication each way (moe.ep_comm_fwd_s: the two all-to-alls move
    the same bytes)."""
    if not (cfg.moe_a2a_overlap and geo.moe_layer and cfg.ep > 1 and ep_comm > 0):
        return 0.0
    share = c.fwd_s / (c.fwd_s + c.bwd_s) if c.fwd_s + c.bwd_s > 0 else 0.5
    experts = c.experts_s
    a2a = ep_comm / 4  # one all-to-all (with its expert-TP collective) of one direction
    fwd = moe.PassParts(attn=c.fwd_s - experts + tp_fwd + share * cp, mlp=experts, dispatch=a2a, combine=a2a)
    attn_w = c.qkv_s + c.out_s
    bwd = moe.PassParts(attn=max(0.0, c.bwd_s - 2 * experts - attn_w) + tp_bwd + (1 - share) * cp, mlp=experts,
                        dispatch=a2a, combine=a2a, attn_wgrad=attn_w, mlp_wgrad=experts)
    return moe.combined_saving_s(fwd, bwd, cluster.gpu.overlap_interference)
