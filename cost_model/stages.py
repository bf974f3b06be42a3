"""Pipeline composition: from the layer table and a stage partition to per-rank time and
memory and the step time. The planner's ILP encodes exactly these formulas.

Step time (Narayanan et al. SC'21 §2.2, generalised to uneven stages):
  T_pipe = m * max_r t_r + (sum_r t_r - max_r t_r) / v
where t_r is pipeline rank r's forward+backward time for one micro-batch over all its
(virtual) stages, m the micro-batches per step and v the virtual stages per rank. Uniform
stages give m*t + (p-1)*t/v: the bubble fraction (p-1)/m of GPipe and 1F1B, and (1/v)(p-1)/m
of the interleaved schedule. With uneven stages the slowest rank sets the steady state.
  step = T_pipe + max_r (max(0, dp_sync_r - w * bwd_r) + optimizer_r)   (w: layers.dp_window_factor)
Gradient sync of the data-parallel group overlaps the backward of the last micro-batch
(bucketed all-reduce / reduce-scatter as in PyTorch DDP, Li et al. VLDB'20, and Megatron's
overlap-grad-reduce); whatever outlasts that backward is exposed. The optimizer step follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import memory
from .layers import LayerTable, dp_window_factor, overlapped_s
from .vocab import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE


@dataclass(frozen=True)
class StageSlice:
    """One (virtual) pipeline stage: blocks first..last inclusive, of which the first
    `recompute_layers` are fully recomputed when the recompute mode is "full"."""

    index: int
    first: int
    last: int
    recompute_layers: int = 0


@dataclass(frozen=True)
class RankCost:
    rank: int
    time_s: float  # one micro-batch, forward + backward, all of this rank's stages
    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    zero3_comm_s: float
    pp_comm_s: float
    bwd_s: float  # the DP-overlap window: backward compute of one micro-batch x layers.dp_window_factor
    dp_sync_s: float
    optimizer_s: float
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    transient_bytes: float
    hardware_extra_flops: float  # recomputed FLOPs per micro-batch
    reserved_bytes: float = 0.0  # outside the allocator: CUDA context, communicator buffers
    overlap_interference: float = 0.0

    @property
    def exposed_dp_s(self) -> float:
        """DP sync overlapped with the last micro-batch's backward."""
        return overlapped_s(self.dp_sync_s, self.bwd_s, self.overlap_interference)

    @property
    def allocated_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def other_bytes(self) -> float:
        """Transient buffers + reserved + allocator fragmentation margin."""
        return self.peak_bytes - self.allocated_bytes

    @property
    def peak_bytes(self) -> float:
        return memory.peak_bytes(self.allocated_bytes, self.transient_bytes, self.reserved_bytes)


def stage_sends(k: int, num_stages: int) -> int:
    """Activation sends of virtual stage k per micro-batch and direction: one to the next
    stage unless it is the last, one from the previous unless it is the first (each send
    costs LayerTable.p2p_s; forward activations and backward gradients have one size)."""
    return (k < num_stages - 1) + (k > 0)


def transient_bytes(table: LayerTable, recompute_mode: str, recomputes: bool) -> float:
    """Transient buffers of the block in flight, summed (all live during its backward): its
    working set (activation gradients; ZeRO-3 gathered parameters and gradients), the
    tensors selective recompute re-materialises, and the whole block's activations when
    the rank fully recomputes any block (LayerTable's properties)."""
    extra = table.selective_buffer_bytes if recompute_mode == RECOMPUTE_SELECTIVE else 0.0
    return table.zero3_buffer_bytes + extra + (table.block_act_peak_bytes if recomputes else 0.0)


def rank_transient_bytes(blocks_transient: float, extra_layers_transient: float) -> float:
    """A rank's transient peak, as the caching allocator reserves it: the block in flight's
    working set plus, on the last stage, the loss transient. Summed although they are not
    allocated at once: the blocks' forward temporaries, freed, stay in the allocator's
    cache (no empty_cache in a training step) in segments too small to hold the loss's
    logits-sized tensors, so the loss reserves new segments beside them; the peak that
    decides out-of-memory is the reserved one (PyTorch "CUDA semantics: memory
    management": cached blocks are not merged across segments)."""
    return blocks_transient + extra_layers_transient


def balanced_stage_layers(num_layers: int, num_stages: int) -> list[int]:
    """Even split; the remainder goes to the middle stages first, because the first and
    last stages also carry the embedding and the output layer."""
    base, extra = divmod(num_layers, num_stages)
    counts = [base] * num_stages
    order = list(range(1, num_stages - 1)) + [0, num_stages - 1] if num_stages > 2 else list(range(num_stages))
    for i in order[:extra]:
        counts[i] += 1
    return counts


def slices_from_counts(counts: list[int] | tuple[int, ...], recompute: list[int] | tuple[int, ...] | None) -> list[StageSlice]:
    out, first = [], 0
    for k, n in enumerate(counts):
        r = n if recompute is None else recompute[k]
        out.append(StageSlice(k, first, first + n - 1, min(r, n)))
        first += n
    return out


def rank_cost(
    table: LayerTable,
    slices: list[StageSlice],
    rank: int,
    pp: int,
    recompute_mode: str,
    schedule: str,
    num_micro_batches: int,
    vpp: int,
    reserved_bytes: float = 0.0,
    overlap_interference: float = 0.0,
) -> RankCost:
    """Time and memory of pipeline rank `rank` (virtual stage k lives on rank k % pp)."""
    n_stages = len(slices)
    time = comp = rc = tp = cp = ep = z3 = ppc = bwd = dp = opt = 0.0
    w = g = o = act = extra_flops = 0.0
    recomputes = False
    extra_transient = 0.0
    for sl in slices:
        if sl.index % pp != rank:
            continue
        layers = [(table.blocks[i], i - sl.first) for i in range(sl.first, sl.last + 1)]
        if sl.index == 0:
            layers.insert(0, (table.embedding, -1))
        if sl.index == n_stages - 1:
            layers.append((table.output, -1))
            extra_transient = max(extra_transient, table.output.transient_bytes)
        for lc, pos in layers:
            full = recompute_mode == RECOMPUTE_FULL and 0 <= pos < sl.recompute_layers
            if full:
                extra, a = lc.recompute_full_s, lc.act.full
                recomputes = True
                extra_flops += lc.flops_model / 3.0
            elif recompute_mode == RECOMPUTE_SELECTIVE and pos >= 0:
                extra, a = lc.recompute_selective_s, lc.act.selective
            else:
                extra, a = 0.0, lc.act.none
            comp += lc.compute_s
            rc += extra
            tp += lc.tp_comm_s
            cp += lc.cp_comm_s
            ep += lc.ep_comm_s
            z3 += lc.zero3_comm_s
            bwd += lc.compute_s - lc.fwd_s
            dp += lc.dp_sync_s
            opt += lc.optimizer_s
            w += lc.weights_bytes
            g += lc.grads_bytes
            o += lc.optimizer_bytes
            act += a
        ppc += stage_sends(sl.index, n_stages) * table.p2p_s
    time = comp + rc + tp + cp + ep + z3 + ppc
    transient = rank_transient_bytes(transient_bytes(table, recompute_mode, recomputes), extra_transient)
    inflight = memory.in_flight_micro_batches(schedule, pp, rank, num_micro_batches, vpp)
    return RankCost(
        rank=rank,
        time_s=time,
        compute_s=comp,
        recompute_s=rc,
        tp_comm_s=tp,
        cp_comm_s=cp,
        ep_comm_s=ep,
        zero3_comm_s=z3,
        pp_comm_s=ppc,
        bwd_s=bwd * dp_window_factor(pp, vpp),  # the DP-overlap window (layers.dp_window_factor)
        dp_sync_s=dp,
        optimizer_s=opt,
        weights_bytes=w,
        grads_bytes=g,
        optimizer_bytes=o,
        activations_bytes=act * inflight,
        transient_bytes=transient,
        hardware_extra_flops=extra_flops,
        reserved_bytes=reserved_bytes,
        overlap_interference=overlap_interference,
    )


def pipeline_time_s(rank_times: list[float], num_micro_batches: int, vpp: int) -> float:
    """T_pipe of the module docstring."""
    slowest = max(rank_times)
    return num_micro_batches * slowest + (sum(rank_times) - slowest) / max(1, vpp)


def step_time_s(ranks: list[RankCost], num_micro_batches: int, vpp: int) -> float:
    tail = max(r.exposed_dp_s + r.optimizer_s for r in ranks)
    return pipeline_time_s([r.time_s for r in ranks], num_micro_batches, vpp) + tail
