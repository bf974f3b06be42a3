"""Pipeline composition: from the layer table and a stage partition to per-rank time and
memory and the step time. The planner's ILP encodes exactly these formulas.

Step time, one virtual stage per rank, 1F1B (Narayanan et al. SC'21 §2.2, generalised to
uneven stages):
  T_pipe = m * max_r t_r + (sum_r t_r - max_r t_r)
where t_r is pipeline rank r's forward+backward time for one micro-batch and m the
micro-batches per step. Uniform stages give m*t + (p-1)*t: the bubble fraction (p-1)/m.
With uneven stages the slowest rank sets the steady state; the schedule simulation
(schedule_sim.py) never exceeds this form (tests/cost_model/test_schedule_sim.py).
GPipe runs all forwards, then all backwards: two flow shops of m identical jobs, the
backward one starting when the last stage's forwards end (every other rank's forwards have
ended by then), each taking the sum of its stage times plus m-1 times its slowest:
  T_pipe = sum_r t_r + (m - 1) * (max_r f_r + max_r b_r)
(f, b: a rank's forward and backward, t = f + b); the same as 1F1B's form for uniform
stages, above it when the slowest forward and the slowest backward are on different ranks
(1F1B's form was up to 1.9% under the simulated GPipe on random uneven stages).

Interleaved 1F1B, v > 1 virtual stages (chunks) per rank: SC'21 §2.2 prices it as
m*t + (p-1)*t/v, which assumes the v chunks of every rank equal. With uneven chunks that
form is too fast by up to a third: in Megatron's order (order.rank_order) a rank
runs a group of p micro-batches through one chunk before the next, so a large chunk on one
rank stalls its neighbours every group, not only at fill and drain. The form priced here
is a lock-step schedule of that same order: global slot g holds, on rank r,
  the forward of table entry j = g + (v-1)p + (p-1-r)   (its 2(p-r-1) + (v-1)p warm-up
  the backward of table entry k = g - (p-1-r)            forwards plus the steady pairs)
(entries of Megatron's schedule table, order.interleaved_table; the backward of
entry k runs chunk v-1-chunk(k)), and a slot lasts as long as its slowest rank's ops:
  T_pipe = sum_g max_r (f_r,g + b_r,g)
with f, b a chunk's forward (plus its activation send) and backward (plus recomputation and
its gradient send). Every dependency of the order goes from an earlier slot to a later one
(a forward waits on the previous stage's forward, a backward on the next stage's backward,
each one slot earlier, across the chunk boundary between rank p-1 and rank 0 too; the loss's
backward on its forward, in the same slot on the same rank), so the
lock-step schedule is a valid execution of Megatron's order and T_pipe is never below the
simulated (earliest-start) time. With equal chunks (forward f, backward b, t = v(f+b)) the
vp-1 warm-up slots hold forwards only, the vp-1 cool-down slots backwards only and the
mv-vp+p others one of each: (mv+p-1)(f+b) = m*t + (p-1)*t/v, SC'21's form exactly.
The priced form is the larger of the two,
  T_pipe = max(sum_g max_r (f_r,g + b_r,g),  m * max_r t_r + (sum_r t_r - max_r t_r) / v),
still an upper bound of the simulation; SC'21's term exceeds the lock-step one only when the
ranks' chunks differ (by up to ~6% on random partitions) and keeps the planner's lower bounds
(planner/bounds.py, built on SC'21's form) valid. Measured against the simulation on random
partitions (pp 2-8, v 2-4, m = pp..8pp, 500 draws each; tests/cost_model/
test_schedule_sim.py): never below it; above it by 3% on average for chunks within one block
of each other (at most 21%, small chunks) and 8% for arbitrary ones (at most 32%), where the
earliest-start order lets a fast rank run ahead of the slot boundary; on planned partitions
(near-even, the logits chunk smaller) 0.6% (llama3-70b on 64 H100, pp4 vpp4) to 3%
(llama3-8b on 16 H100, pp4 vpp2). SC'21's form alone is below the simulation by up to 22%
(near-even) and 42% (arbitrary) on the same draws. The slots repeat with period pv, so the sum has
O(pv) distinct terms (`lockstep_slots`), each a max of linear terms: the ILP encodes it
exactly.

  step = T_pipe + max_r (max(0, dp_sync_r - w * bwd_r) + optimizer_r)   (w: layers.dp_window_factor)
Gradient sync of the data-parallel group overlaps the backward of the last micro-batch
(bucketed all-reduce / reduce-scatter as in PyTorch DDP, Li et al. VLDB'20, and Megatron's
overlap-grad-reduce); whatever outlasts that backward is exposed. The optimizer step follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from cost_model.pipeline import in_flight
from cost_model.pipeline.order import interleaved_table, stage_of, stage_rank
from cost_model.pipeline.simulator import StageTimes, simulate
from cost_model.specs.vocab import (
    RECOMPUTE_FULL,
    RECOMPUTE_SELECTIVE,
    SCHEDULE_GPIPE,
    SCHEDULE_INTERLEAVED,
    SCHEDULE_ZB1P,
    SPLIT_BACKWARD_SCHEDULES,
)
from cost_model.terms import memory
from cost_model.terms.layers import LayerTable
from cost_model.terms.overlap import dp_window_factor, overlapped_s


class StageSlice(NamedTuple):
    """One (virtual) pipeline stage: blocks first..last inclusive, of which the first
    `recompute_layers` are fully recomputed when the recompute mode is "full". A NamedTuple:
    the search builds one per stage for every partition it prices."""

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
    # per virtual stage of this rank, in chunk order: forward (+ activation send) and
    # backward (+ recomputation + gradient send) of one micro-batch; they add up to time_s
    chunk_fwd_s: tuple[float, ...] = ()
    chunk_bwd_s: tuple[float, ...] = ()
    # per virtual stage: what its forward, and again its backward, adds when it runs alone
    # rather than combined with another micro-batch's (overlapped 1F1B all-to-all; else 0)
    chunk_unpaired_s: tuple[float, ...] = ()
    warmup_extra: int = 0  # forwards added to the warm-up (stages.warmup_extra)
    # per virtual stage: of chunk_bwd_s, the weight-gradient work (W) the zero-bubble
    # schedules run apart (LayerCost.wgrad_s summed)
    chunk_wgrad_s: tuple[float, ...] = ()
    host_bytes: float = 0.0  # host memory of this rank's offloaded optimizer states and activations

    @property
    def exposed_dp_s(self) -> float:
        """DP sync overlapped with the last micro-batch's backward."""
        return overlapped_s(self.dp_sync_s, self.bwd_s, self.overlap_interference)

    @property
    def allocated_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def other_bytes(self) -> float:
        """Transient buffers (the optimizer step's own included where they set the peak:
        rank_cost) + reserved + allocator fragmentation margin."""
        return self.peak_bytes - self.allocated_bytes

    @property
    def peak_bytes(self) -> float:
        return memory.peak_bytes(self.allocated_bytes, self.transient_bytes, self.reserved_bytes)


def stage_sends(k: int, num_stages: int) -> int:
    """Activation sends of virtual stage k per micro-batch and direction: one to the next
    stage unless it is the last, one from the previous unless it is the first (each send
    costs LayerTable.p2p_s; forward activations and backward gradients have one size)."""
    return (k < num_stages - 1) + (k > 0)


def layer_fwd_s(lc) -> float:
    """The forward's part of a layer's per-micro-batch time (LayerCost.time_s): its forward
    compute, half its exposed TP and EP communication (Megatron runs 2 of the 4 TP
    all-reduce-equivalents and one of the two all-to-all pairs in each direction, Shoeybi et
    al. 2019 §3; DeepSeek-V3 §3.2) and of CP and ZeRO-3 communication the share of the
    compute it overlaps (ring attention and the parameter gathers run once per direction,
    the backward ones being the longer). The backward's part is the rest."""
    share = lc.fwd_s / lc.compute_s if lc.compute_s > 0 else 0.5
    return lc.fwd_s + 0.5 * (lc.tp_comm_s + lc.ep_comm_s) + share * (lc.cp_comm_s + lc.zero3_comm_s)


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


def empty_end_layouts(num_layers: int, num_stages: int) -> list[list[int]]:
    """The layouts of more stages than blocks where only the ends hold none: the first stage
    only the embedding, the last only the loss (a layout that counts them as pipeline layers,
    Megatron's --account-for-embedding/loss-in-pipeline-split, torchtitan's default split).
    One block per other stage: blocks + 2 stages have one layout, blocks + 1 two (the
    embedding or the loss alone), more stages none."""
    if num_stages == num_layers + 2:
        return [[0] + [1] * num_layers + [0]]
    if num_stages == num_layers + 1:
        return [[0] + [1] * num_layers, [1] * num_layers + [0]]
    return []


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
    """Time and memory of pipeline rank `rank` (virtual stage k lives on rank k % pp, or in a
    V under the V schedules: order.stage_rank)."""
    n_stages = len(slices)
    time = comp = rc = tp = cp = ep = z3 = ppc = bwd = dp = opt = 0.0
    w = g = o = host = step = extra_flops = 0.0
    recomputes = False
    extra_transient = 0.0
    chunk_fwd: list[float] = []
    chunk_time: list[float] = []
    chunk_act: list[float] = []  # per virtual stage of this rank: bytes one micro-batch leaves
    chunk_unpaired: list[float] = []
    chunk_wgrad: list[float] = []
    chunk_host: list[float] = []  # per virtual stage: host bytes of one micro-batch's offloaded activations
    split = schedule in SPLIT_BACKWARD_SCHEDULES
    for sl in slices:
        if stage_rank(sl.index, pp, schedule) != rank:
            continue
        fwd_k = time_k = act_k = unpaired_k = wgrad_k = host_k = 0.0
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
            fwd_k += layer_fwd_s(lc)
            time_k += lc.time_s + extra
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
            host += lc.host_bytes
            step += lc.step_bytes
            if split:
                # a split backward keeps the micro-batch's autograd graph (retain_graph=True)
                # and its GEMMs' output gradients from the input-gradient op to the
                # weight-gradient op (torch pipelining/_backward.py stage_backward_input):
                # whatever recomputation re-made is held again, so the whole activations
                # plus those gradients, counted from the forward to W (in_flight)
                a = (lc.act.none if pos >= 0 else a) + lc.wgrad_held_bytes
            act_k += a
            host_k += lc.act_host_bytes
            unpaired_k += lc.ep_unpaired_s / 2
            wgrad_k += lc.wgrad_s
        ppc += stage_sends(sl.index, n_stages) * table.p2p_s
        chunk_act.append(act_k)
        chunk_host.append(host_k)
        chunk_unpaired.append(unpaired_k)
        chunk_wgrad.append(wgrad_k)
        chunk_fwd.append(fwd_k + (table.p2p_s if sl.index < n_stages - 1 else 0.0))
        chunk_time.append(time_k + stage_sends(sl.index, n_stages) * table.p2p_s)
    time = comp + rc + tp + cp + ep + z3 + ppc
    transient = rank_transient_bytes(transient_bytes(table, recompute_mode, recomputes), extra_transient)
    transient += combined_extra_bytes(table, recompute_mode, schedule, vpp)
    # saved activations at the rank's peak: per virtual stage, the micro-batches the schedule
    # holds there (Megatron's interleaved order holds its chunks unequally) x that stage's
    # bytes (in_flight.peak_in_flight_bytes)
    act = in_flight.peak_in_flight_bytes(schedule, pp, rank, num_micro_batches, vpp, tuple(chunk_act),
                                      warmup_extra(table))
    # the optimizer step's own buffers (LayerCost.step_bytes) are allocated once the backward
    # has freed the activations: the rank's peak is the larger of the two moments, so they
    # count where they exceed the activations and the transients (ilp.py's step row)
    transient = max(transient, step - act)
    if any(chunk_host):
        # the offloaded activations of the micro-batches in flight (terms/act_offload.py)
        host += in_flight.peak_in_flight_bytes(schedule, pp, rank, num_micro_batches, vpp, tuple(chunk_host),
                                               warmup_extra(table))
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
        host_bytes=host,
        activations_bytes=act,
        transient_bytes=transient,
        hardware_extra_flops=extra_flops,
        reserved_bytes=reserved_bytes,
        overlap_interference=overlap_interference,
        chunk_fwd_s=tuple(chunk_fwd),
        chunk_bwd_s=tuple(t - f for t, f in zip(chunk_time, chunk_fwd, strict=True)),
        chunk_unpaired_s=tuple(chunk_unpaired),
        warmup_extra=warmup_extra(table),
        chunk_wgrad_s=tuple(chunk_wgrad),
    )


def isolated_schedule(schedule: str) -> str:
    """The schedule to price one stage alone with (rank_cost over one stage per rank, one
    micro-batch: the per-stage times of simulator.StageTimes and the estimate's stages):
    the same backward split, looped placement (the V schedules' orders need two chunks per
    rank and DualPipeV 2pp micro-batches)."""
    return SCHEDULE_ZB1P if schedule in SPLIT_BACKWARD_SCHEDULES else schedule


def warmup_extra(table: LayerTable) -> int:
    """Forwards Megatron adds to the interleaved warm-up under the overlapped 1F1B all-to-all
    (in_flight.interleaved_live_chunks)."""
    return 1 if table.combined_1f1b else 0


def combined_extra_bytes(table: LayerTable, recompute_mode: str, schedule: str, vpp: int) -> float:
    """Activations the overlapped 1F1B holds beyond the schedule's count without interleaving
    (pp = 1, Megatron-Core combined_1f1b_schedule_for_no_pipelining, megatron-core 0.16.1
    pipeline_parallel/combined_1f1b.py): micro-batch i+1's forward runs layer by layer
    beside micro-batch i's backward, which pops the layers in reverse
    (TransformerModelChunkSchedulePlan.run), so when the forward has saved layer l the
    backward still holds layers l..L-1: one micro-batch and one block. Interleaved, the
    extra warm-up forward is counted whole instead (warmup_extra)."""
    if not table.combined_1f1b or (schedule == SCHEDULE_INTERLEAVED and vpp > 1):
        return 0.0
    if recompute_mode == RECOMPUTE_SELECTIVE:
        return max((b.act.selective for b in table.blocks), default=0.0)
    return max((b.act.none for b in table.blocks), default=0.0)


def _forward_slot(entry: int, rank: int, pp: int, vpp: int, warmup_extra: int = 0) -> int:
    return entry - (vpp - 1) * pp - (pp - 1 - rank) - warmup_extra


def _backward_slot(entry: int, rank: int, pp: int) -> int:
    return entry + (pp - 1 - rank)


def lockstep_slot(kind: str, rank: int, micro_batch: int, chunk: int, pp: int, vpp: int, num_micro_batches: int,
                  warmup_extra: int = 0) -> int:
    """The lock-step slot of one op of order.rank_order ("F"/"B", micro-batch, chunk)."""

    table = interleaved_table(num_micro_batches, vpp, pp)
    if kind == "F":
        return _forward_slot(table.index((micro_batch, chunk)), rank, pp, vpp, warmup_extra)
    return _backward_slot(table.index((micro_batch, vpp - 1 - chunk)), rank, pp)


Slot = tuple[int, tuple[tuple[int, int, int], ...]]  # (how many slots, ((rank, fwd chunk, bwd chunk), ...))


@lru_cache(maxsize=256)
def lockstep_slots(pp: int, vpp: int, num_micro_batches: int, warmup_extra: int = 0) -> tuple[Slot, ...]:
    """The distinct slots of the interleaved lock-step form (module docstring) with their
    multiplicity: per slot, each busy rank's forward chunk and backward chunk (-1: none).
    The forward of Megatron's schedule-table entry j (chunk(j)) sits in slot
    j - (v-1)p - (p-1-r), the backward of entry k (chunk v-1-chunk(k)) in slot k + (p-1-r).
    `warmup_extra` forwards more in the warm-up (the overlapped 1F1B all-to-all) move every
    forward that many slots earlier: the order's steady pairs (forward of entry warm + k,
    backward of entry k) still share a slot, and every dependency still points to an
    earlier slot or, for the loss's backward, a forward one slot earlier still."""

    p, v, m = pp, vpp, num_micro_batches
    chunks = [c for _, c in interleaved_table(m, v, p)]
    slots: dict[int, dict[int, list[int]]] = {}
    for r in range(p):
        for j, c in enumerate(chunks):
            slots.setdefault(_forward_slot(j, r, p, v, warmup_extra), {}).setdefault(r, [-1, -1])[0] = c
            slots.setdefault(_backward_slot(j, r, p), {}).setdefault(r, [-1, -1])[1] = v - 1 - c
    counts: dict[tuple[tuple[int, int, int], ...], int] = {}
    for g in sorted(slots):
        key = tuple((r, f, b) for r, (f, b) in sorted(slots[g].items()))
        counts[key] = counts.get(key, 0) + 1
    return tuple((n, key) for key, n in counts.items())


def pipeline_time_s(chunk_fwd_s: Sequence[Sequence[float]], chunk_bwd_s: Sequence[Sequence[float]],
                    num_micro_batches: int, vpp: int, schedule: str,
                    chunk_unpaired_s: Sequence[Sequence[float]] | None = None, warmup_extra: int = 0,
                    chunk_wgrad_s: Sequence[Sequence[float]] | None = None) -> float:
    """T_pipe of the module docstring; chunk_fwd_s[r][c] (chunk_bwd_s[r][c]) is the forward
    (backward) of chunk c of rank r for one micro-batch (RankCost.chunk_fwd_s).
    chunk_unpaired_s[r][c] (overlapped 1F1B all-to-all, RankCost.chunk_unpaired_s): the times
    above are those of a forward or backward combined with another micro-batch's, and one
    run alone takes this much more. Interleaved, the lock-step slots holding a forward only
    (warm-up) or a backward only (cool-down) add it. Without interleaving, the warm-up and
    cool-down cross every rank once each way: sum_r of a rank's forward and backward extra
    (pp = 1: the first forward and the last backward, combined_1f1b_schedule_for_no_pipelining).
    `warmup_extra`: the extra warm-up forwards of that schedule (lockstep_slots).
    chunk_wgrad_s[r][c]: of chunk_bwd_s, the weight-gradient work the zero-bubble family
    runs apart (split_pipeline_time_s)."""
    m, v = num_micro_batches, max(1, vpp)
    if schedule in SPLIT_BACKWARD_SCHEDULES:
        wgrad = chunk_wgrad_s or [[0.0] * len(f) for f in chunk_fwd_s]
        return split_pipeline_time_s(chunk_fwd_s, chunk_bwd_s, wgrad, m, v, schedule)
    alone = chunk_unpaired_s or [[0.0] * len(f) for f in chunk_fwd_s]
    if v == 1:
        times = [sum(f) + sum(b) for f, b in zip(chunk_fwd_s, chunk_bwd_s, strict=True)]
        if schedule == SCHEDULE_GPIPE:
            return sum(times) + (m - 1) * (max(map(sum, chunk_fwd_s)) + max(map(sum, chunk_bwd_s)))
        slowest = max(times)
        return m * slowest + sum(times) - slowest + 2 * sum(map(sum, alone))
    times = [sum(f) + sum(b) for f, b in zip(chunk_fwd_s, chunk_bwd_s, strict=True)]
    slowest = max(times)
    ops, slots = lockstep_ops(len(chunk_fwd_s), v, m, warmup_extra)
    work = []  # per distinct (rank, forward chunk, backward chunk) of the slots
    for r, f, b in ops:
        d = (chunk_fwd_s[r][f] if f >= 0 else 0.0) + (chunk_bwd_s[r][b] if b >= 0 else 0.0)
        if f < 0 or b < 0:  # a forward or a backward alone: not combined
            d += alone[r][max(f, b)]
        work.append(d)
    total = 0.0
    at = work.__getitem__
    for n, ids in slots:
        total += n * max(0.0, max(map(at, ids)))
    return max(total, m * slowest + (sum(times) - slowest) / v)


@lru_cache(maxsize=256)
def lockstep_ops(pp: int, vpp: int, num_micro_batches: int, warmup_extra: int = 0):
    """lockstep_slots with each op (rank, forward chunk, backward chunk) numbered once:
    (the distinct ops, per slot (multiplicity, its ops' numbers)), so that pipeline_time_s
    prices each op once per call and a slot is a maximum over its numbers."""
    index: dict[tuple[int, int, int], int] = {}
    slots = []
    for n, ops in lockstep_slots(pp, vpp, num_micro_batches, warmup_extra):
        slots.append((n, tuple(index.setdefault(op, len(index)) for op in ops)))
    return tuple(index), tuple(slots)


def rank_pipeline_time_s(ranks: Sequence[RankCost], num_micro_batches: int, vpp: int, schedule: str) -> float:
    """pipeline_time_s of the ranks' chunk times."""
    unpaired = [r.chunk_unpaired_s or (0.0,) * len(r.chunk_fwd_s) for r in ranks]
    return pipeline_time_s([r.chunk_fwd_s for r in ranks], [r.chunk_bwd_s for r in ranks], num_micro_batches, vpp,
                           schedule, unpaired, max((r.warmup_extra for r in ranks), default=0),
                           [r.chunk_wgrad_s or (0.0,) * len(r.chunk_fwd_s) for r in ranks])


def split_pipeline_time_s(chunk_fwd_s, chunk_bwd_s, chunk_wgrad_s, num_micro_batches: int, vpp: int,
                          schedule: str) -> float:
    """T_pipe of the zero-bubble family (chunk times as in pipeline_time_s; the weight-gradient
    part of each backward is chunk_wgrad_s, at most the backward): the schedule simulation's
    (pipeline/simulator.py) of torch's order on these chunk times, memoised by its inputs.
    No short form holds for unequal F, B and W: torch's ScheduleZBVZeroBubble docstring has
    zero bubble "only if time forward == time backward input == time backward weights", and
    ZB1P's (p-1) max(F + B - W, F, B) (Qi et al. ICLR'24 §2.1, exact on equal stages) falls
    up to ~3% below the simulation on stages within +-30% of each other where W exceeds B
    (tests/cost_model/test_zero_bubble.py)."""
    wg = [[min(w, b) for w, b in zip(ws, bs, strict=True)] for ws, bs in zip(chunk_wgrad_s, chunk_bwd_s, strict=True)]
    return _simulated_pipeline_s(tuple(map(tuple, chunk_fwd_s)), tuple(map(tuple, chunk_bwd_s)),
                                 tuple(map(tuple, wg)), num_micro_batches, vpp, schedule)


@lru_cache(maxsize=4096)
def _simulated_pipeline_s(chunk_fwd_s, chunk_bwd_s, chunk_wgrad_s, m: int, vpp: int, schedule: str) -> float:
    pp = len(chunk_fwd_s)
    stages: list = [None] * (pp * vpp)
    for r in range(pp):
        for c in range(vpp):
            stages[stage_of(r, c, pp, schedule)] = StageTimes(chunk_fwd_s[r][c], chunk_bwd_s[r][c],
                                                              wgrad_s=chunk_wgrad_s[r][c])
    return simulate(stages, pp, m, schedule, vpp, record=False).pipeline_time_s


def bubble_s(pipeline_s: float, ranks: Sequence[RankCost], num_micro_batches: int) -> float:
    """The pipeline bubble: the pipeline time `pipeline_s` (rank_pipeline_time_s) less m x
    the slowest rank's time per micro-batch, i.e. the fill and drain (uniform 1F1B: (p-1) x
    a stage's time, Narayanan et al. SC'21 §2.2; interleaved: / vpp, §2.2.2). With the
    overlapped 1F1B all-to-all it holds too the all-to-alls that the warm-up forwards and
    cool-down backwards, run alone, expose (LayerCost.ep_unpaired_s). Never negative: the
    pipeline time is m x the slowest rank plus the fill and drain, so a difference below zero
    is float rounding (pp=1: the same sum taken in two orders, ~-1e-14 s) and reads as 0."""
    return clamp_rounding(pipeline_s - num_micro_batches * max(r.time_s for r in ranks), pipeline_s)


# relative size of the rounding error a difference of sums of ~1e3 terms can carry (double
# precision: 2^-52 ~ 2.2e-16 per operation, accumulated)
ROUNDING_REL = 1e-9


def clamp_rounding(value: float, scale: float) -> float:
    """A quantity non-negative by construction, computed as a difference of two sums of size
    `scale`: 0.0 where it lies below zero by no more than float rounding (never -0.0); a
    larger negative is a modelling error and is returned as is, to be seen."""
    return 0.0 if -ROUNDING_REL * abs(scale) <= value <= 0.0 else value


def step_time_s(ranks: list[RankCost], num_micro_batches: int, vpp: int, schedule: str) -> float:
    tail = max(r.exposed_dp_s + r.optimizer_s for r in ranks)
    return rank_pipeline_time_s(ranks, num_micro_batches, vpp, schedule) + tail
