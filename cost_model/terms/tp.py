"""Tensor-parallel communication of one block (Shoeybi et al. 2019 §3): 2 all-reduces of the
b*s*h activations in forward and 2 in backward; with sequence parallelism (Korthikanti et al.
2022 §4.2.2) each becomes an all-gather + reduce-scatter of the same volume. Exposed, except
where the engine runs them under the GEMMs (Megatron's backward async collectives; with
--tp-comm-overlap every one of them, kernels.TpCommOverlap).
"""

from __future__ import annotations

from cost_model.engines import kernels
from cost_model.engines import support as engines
from cost_model.hardware import comm
from cost_model.specs.inputs import ParallelConfig, TransformerSpec
from cost_model.specs.vocab import DTYPE_BYTES, DTYPE_FP8
from cost_model.terms.geometry import BlockCompute, BlockGeometry
from cost_model.terms.overlap import overlapped_s


def tp_sync_s(nbytes: float, tp: int, link, fits, sequence_parallel: bool) -> float:
    """One Megatron f/g operator on a b*s*h activation: an all-reduce (Shoeybi et al. 2019,
    fig. 3), or with sequence parallelism an all-gather plus a reduce-scatter (Korthikanti
    et al. 2022, sec. 4.2.2). The ring formulas make the two equal; measured fits (a
    profile's per-collective alpha-beta) can tell them apart."""
    if sequence_parallel:
        return comm.all_gather_s(nbytes, tp, link, fits) + comm.reduce_scatter_s(nbytes, tp, link, fits)
    return comm.all_reduce_s(nbytes, tp, link, fits)


def tp_overlap(cluster, cfg: ParallelConfig, geo: BlockGeometry) -> kernels.TpCommOverlap | None:
    """The engine's TP communication/GEMM overlap where it runs (engines.tp_comm_overlap, the
    predicate the launch emitter switches --tp-comm-overlap on), else None."""
    if not engines.tp_comm_overlap(cfg.engine, cfg.tp, cfg.sequence_parallel, cluster.gpus_per_node):
        return None
    return geo.kernels.tp_overlap


def ring_exchange_s(comm_s: float, gemm_s: float, tp: int, gamma: float) -> float:
    """Exposed time of a collective run as TE's ring exchange beside a GEMM split in tp
    chunks (kernels.TpCommOverlap): chunk i's GEMM runs while chunk i+1 arrives, so tp-1
    chunk GEMMs hide it: total = (tp-1) max(gemm/tp, comm/(tp-1)) + gemm/tp."""
    return overlapped_s(comm_s, gemm_s * (tp - 1) / tp, gamma)


def pipelined_rs_s(comm_s: float, gemm_s: float, splits: int, gamma: float) -> float:
    """Exposed time of a reduce-scatter pipelined behind a GEMM in `splits` chunks (TE
    'pipeline' method): chunk i's reduce-scatter under chunk i+1's GEMM, the last one after
    the GEMM: comm/n + the overlap rule on the other (n-1)/n."""
    n = max(1, splits)
    return comm_s / n + overlapped_s(comm_s * (n - 1) / n, gemm_s * (n - 1) / n, gamma)


def block_tp_fwd_s(m: TransformerSpec, cluster, cfg: ParallelConfig, geo: BlockGeometry, c: BlockCompute,
                    fits) -> float:
    """Forward TP communication of a block: 2 f/g operators on the b*s*h activation
    (Shoeybi et al. 2019 fig. 3: one after attention, one after the MLP). FP8 with SP
    gathers the column-parallel input already cast to fp8, 1 byte per element (Transformer
    Engine linear.py / layernorm_linear.py forward: cast, then gather_along_first_dim; TE
    userbuffers' all-gather buffers are fp8 under an fp8 recipe, initialize_ub; torchtitan's
    Float8ColwiseParallel / PrepareFloat8ModuleInput, parallelize_llama.py @9dec370).
    Exposed, unless the engine's TP overlap runs (`tp_overlap`): then the all-gather is a
    ring exchange under the column-parallel GEMM (qkv, fc1) and the reduce-scatter is
    pipelined behind the row-parallel GEMM (proj, fc2); MoE blocks' expert GEMMs hide
    nothing (TE userbuffers are off for expert linears)."""
    ar_bytes = geo.act_dt * geo.tokens * m.hidden_size
    link = comm.group_link(cluster, cfg.tp, 1)
    if cfg.sequence_parallel and cfg.tp > 1:
        ag_bytes = ar_bytes * (DTYPE_BYTES[DTYPE_FP8] / geo.act_dt if geo.fp8 else 1.0)
        ag = comm.all_gather_s(ag_bytes, cfg.tp, link, fits)
        rs = comm.reduce_scatter_s(ar_bytes, cfg.tp, link, fits)
        ov = tp_overlap(cluster, cfg, geo)
        if ov is None:
            return 2 * (ag + rs)
        gamma = cluster.gpu.overlap_interference
        return sum(ring_exchange_s(ag, col_s, cfg.tp, gamma) + pipelined_rs_s(rs, row_s, ov.pipeline_splits, gamma)
                   for col_s, row_s in ((c.qkv_s, c.out_s), (c.up_s, c.down_s)))
    return 2 * tp_sync_s(ar_bytes, cfg.tp, link, fits, cfg.sequence_parallel)


def op_sac_tp_refwd_s(m: TransformerSpec, cluster, cfg: ParallelConfig, geo: BlockGeometry, fits) -> float:
    """Forward TP collectives torchtitan's per-op selective AC runs again in a block's
    backward: its save list holds _c10d_functional.reduce_scatter_tensor and all_to_all_single
    but not all_gather_into_tensor or all_reduce (pytorch/torchtitan
    torchtitan/distributed/activation_checkpoint.py, torchtitan 0.3.0 _get_default_save_ops),
    so under sequence parallelism the two all-gathers before the column-parallel projections
    are repeated, without it the two all-reduces."""
    if cfg.tp <= 1:
        return 0.0
    ar_bytes = geo.act_dt * geo.tokens * m.hidden_size
    link = comm.group_link(cluster, cfg.tp, 1)
    if cfg.sequence_parallel:
        ag_bytes = ar_bytes * (DTYPE_BYTES[DTYPE_FP8] / geo.act_dt if geo.fp8 else 1.0)
        return 2 * comm.all_gather_s(ag_bytes, cfg.tp, link, fits)
    return 2 * comm.all_reduce_s(ar_bytes, cfg.tp, link, fits)


def block_tp_bwd_s(m: TransformerSpec, cluster, cfg: ParallelConfig, geo: BlockGeometry, c: BlockCompute, fits) -> float:
    """Exposed backward TP communication of a block. Per sublayer (attention, MLP) the
    backward of the f operator before the column-parallel input projection: an all-reduce
    of the input gradient, or with SP a reduce-scatter, plus under SP the backward of g (an
    all-gather of the output gradient) and, where the engine does not keep the gathered
    input, its re-gather for the weight gradient (Korthikanti §4.2.2). Megatron runs the
    all-reduce / reduce-scatter under the projection's weight-gradient GEMM and the
    re-gather under its input-gradient GEMM (kernels.py: LinearWithGradAccumulationAnd-
    AsyncCommunication.backward; TE's bulk dgrad/wgrad overlap does the same); each GEMM
    lasts as long as the forward one. The output-gradient all-gather is exposed, unless the
    engine's TP overlap runs (`tp_overlap`): then it is a ring exchange under the
    row-parallel layer's input-gradient GEMM (proj_dgrad, fc2_dgrad). Engines without these
    overlaps expose all of it."""
    tp = cfg.tp
    if tp <= 1:
        return 0.0
    link = comm.group_link(cluster, tp, 1)
    nbytes = geo.act_dt * geo.tokens * m.hidden_size
    k = geo.kernels
    gamma = cluster.gpu.overlap_interference
    ov = tp_overlap(cluster, cfg, geo)
    if cfg.sequence_parallel:
        f_bwd = comm.reduce_scatter_s(nbytes, tp, link, fits)
        g_bwd = comm.all_gather_s(nbytes, tp, link, fits)
        regather = comm.all_gather_s(nbytes, tp, link, fits) if k.sp_regather else 0.0
    else:
        f_bwd, g_bwd, regather = comm.all_reduce_s(nbytes, tp, link, fits), 0.0, 0.0
    total = 0.0
    for gemm_s, row_s in ((c.qkv_s, c.out_s), (c.up_s, c.down_s)):
        g_exposed = ring_exchange_s(g_bwd, row_s, tp, gamma) if ov is not None else g_bwd
        if k.tp_bwd_overlap:
            total += g_exposed + overlapped_s(f_bwd, gemm_s, gamma) + overlapped_s(regather, gemm_s, gamma)
        else:
            total += g_exposed + f_bwd + regather
    return total
