"""Pipeline orders: which (micro-batch, model chunk) each pipeline rank runs when.
GPipe, 1F1B and interleaved 1F1B: Megatron's (megatron/core/pipeline_parallel/schedules.py
get_schedule_table and forward_backward_pipelining_with_interleaving at NVIDIA/Megatron-LM
d98e8a64ddf3). The zero-bubble family: torch's (torch/distributed/pipelining/schedules.py,
torch 2.13.0, git cf30153c4c131c8164ee7798e5022d810682e2cb), `_calculate_single_rank_operations`
of ScheduleInterleavedZeroBubble (zb1p), ScheduleZBVZeroBubble (zbv) and ScheduleDualPipeV
(dualpipev) with the padding no-ops dropped (the runtime blocks on its receives; the
simulator waits on the same dependencies). Ops: F forward, B whole backward, I the
backward's input-gradient part, W its weight-gradient part (torch's F, B, I, W); a
DualPipeV OVERLAP_F_B runs its forward then its whole backward (what torch's runtime does
without a registered custom function, _PipelineScheduleRuntime._step_microbatches).
A leaf: the in-flight memory, the stage composition and the simulator read it.
"""

from __future__ import annotations

from functools import lru_cache

from cost_model.specs.vocab import (
    SCHEDULE_DUALPIPEV,
    SCHEDULE_GPIPE,
    SCHEDULE_INTERLEAVED,
    SCHEDULE_ZB1P,
    SCHEDULE_ZBV,
    V_SCHEDULES,
)

Op = tuple[str, int, int]  # (F|B|I|W, micro-batch, the rank's chunk)


def stage_rank(stage: int, pp: int, schedule: str) -> int:
    """The pipeline rank of virtual stage `stage`: looped (stage % pp, Megatron and torch's
    interleaved schedules) or, for the V schedules, down then back up (torch
    pipelining/_utils.py generate_stage_to_rank_mapping style="v": stage r and 2pp-1-r on r)."""
    chunk, r = divmod(stage, pp)
    if schedule in V_SCHEDULES and chunk % 2:
        return pp - 1 - r
    return r


def rank_stages(rank: int, pp: int, vpp: int, schedule: str) -> tuple[int, ...]:
    """The virtual stages of `rank` in chunk order (ascending stage index)."""
    return tuple(s for s in range(pp * max(1, vpp)) if stage_rank(s, pp, schedule) == rank)


def stage_of(rank: int, chunk: int, pp: int, schedule: str) -> int:
    """The virtual stage of chunk `chunk` of `rank` (rank_stages' entry)."""
    if schedule in V_SCHEDULES and chunk % 2:
        return chunk * pp + pp - 1 - rank
    return chunk * pp + rank


def interleaved_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """Megatron get_schedule_table: virtual micro-batch id -> (micro-batch, model chunk)."""
    table: list[tuple[int, int]] = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        table.extend((mb, chunk) for chunk in range(vpp) for mb in range(lo, hi))
    return table


def warmup_forwards(schedule: str, pp: int, rank: int, m: int, vpp: int = 1, group: int | None = None,
                    warmup_extra: int = 0) -> tuple[int, int]:
    """(warm-up forwards, forwards in all) of one rank in rank_order: its steady 1F1B pairs
    are the forward of entry warm + k with the backward of entry k, k < total - warm."""
    if schedule == SCHEDULE_GPIPE:
        return m, m
    if schedule == SCHEDULE_INTERLEAVED and vpp > 1:
        total = m * vpp
        return min(total, 2 * (pp - rank - 1) + (vpp - 1) * (group or pp) + warmup_extra), total
    return min(m, pp - rank - 1 + warmup_extra), m


def rank_order(schedule: str, pp: int, rank: int, m: int, vpp: int = 1, group: int | None = None,
               warmup_extra: int = 0) -> list[tuple[str, int, int]]:
    """The op sequence of one pipeline rank: (F|B, micro-batch, chunk). `warmup_extra`
    forwards are added to the warm-up (in_flight.interleaved_live_chunks; without pipelining
    Megatron's combined_1f1b_schedule_for_no_pipelining runs the first forward alone, then
    each forward with the previous micro-batch's backward)."""
    if schedule == SCHEDULE_GPIPE:
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == SCHEDULE_ZB1P:
        return list(zb1p_order(pp, rank, m, vpp))
    if schedule == SCHEDULE_ZBV:
        return list(zbv_order(pp, rank, m))
    if schedule == SCHEDULE_DUALPIPEV:
        return list(dualpipev_order(pp, rank, m))
    warm, total = warmup_forwards(schedule, pp, rank, m, vpp, group, warmup_extra)
    if schedule == SCHEDULE_INTERLEAVED and vpp > 1:
        table = interleaved_table(m, vpp, group or pp)
        fwd = [("F", mb, c) for mb, c in table]
        bwd = [("B", mb, vpp - 1 - c) for mb, c in table]
    else:  # pp = 1 with warmup_extra: the first forward alone, then (F i+1, B i)
        fwd = [("F", i, 0) for i in range(m)]
        bwd = [("B", i, 0) for i in range(m)]
    order = fwd[:warm]
    for k in range(total - warm):
        order.append(fwd[warm + k])
        order.append(bwd[k])
    order.extend(bwd[total - warm:])
    return order


def split_schedule_rule(schedule: str, pp: int, vpp: int, m: int) -> str | None:
    """Why torch cannot run a zero-bubble-family schedule at (pp, vpp, m micro-batches), or
    None: ZBV and DualPipeV hold exactly two stages per rank (ScheduleZBVZeroBubble and
    ScheduleDualPipeV __init__: "requires exactly 2 stages per rank"), DualPipeV at least as
    many micro-batches as stages; ZB1P needs m a multiple of its rounds max(1, m // pp)
    (ScheduleInterleavedZeroBubble __init__); all need pp >= 2 to be a pipeline."""
    if pp < 2:
        return f"{schedule} needs pp >= 2"
    if schedule in V_SCHEDULES and vpp != 2:
        return f"{schedule} runs exactly 2 stages per rank (vpp=2), got vpp={vpp}"
    if schedule == SCHEDULE_DUALPIPEV and m < 2 * pp:
        return f"dualpipev needs at least 2*pp = {2 * pp} micro-batches, got {m}"
    if schedule == SCHEDULE_ZB1P and m % zb1p_rounds(pp, m)[0]:
        return f"zb1p needs the {m} micro-batches to be a multiple of max(1, m // pp) = {zb1p_rounds(pp, m)[0]}"
    return None


def zb1p_rounds(pp: int, m: int) -> tuple[int, int]:
    """(rounds, micro-batches per round) of ScheduleInterleavedZeroBubble: max(1, m // pp)
    rounds; torch refuses an m that is not a multiple of the rounds."""
    rounds = max(1, m // pp)
    return rounds, m // rounds


@lru_cache(maxsize=1024)
def zb1p_order(pp: int, rank: int, m: int, vpp: int = 1) -> tuple[Op, ...]:
    """ScheduleInterleavedZeroBubble (ZB1P, Qi et al. ICLR'24 §3 ZB-H1, looped over vpp chunks):
    warm-up of (vpp-1) x per-round + (pp-1-rank) forwards (_get_warmup_ops, multiply_factor
    1), then per step one forward and one input-gradient backward; the weight-gradient work of
    the oldest input-gradient follows each step from step `rank` on (num_1f1b_microbatches =
    rank, _get_1f1b_rank_ops with enable_zero_bubble), the rest at the end."""
    v = max(1, vpp)
    _, per_round = zb1p_rounds(pp, m)
    warm = min((v - 1) * per_round + (pp - 1 - rank), m * v)
    total = m * v
    fwd_bwd = total - warm

    def f_chunk(step: int) -> int:
        return (step // per_round) % v

    def b_chunk(step: int) -> int:
        return v - 1 - ((step - warm) // per_round) % v

    count: dict[tuple[str, int], int] = {}

    def op(kind: str, chunk: int) -> Op:
        mb = count.get((kind, chunk), 0)
        count[(kind, chunk)] = mb + 1
        return (kind, mb, chunk)

    out: list[Op] = []
    backward_steps: list[int] = []
    w = 0
    for step in range(warm + fwd_bwd + warm):
        if step < warm:
            out.append(op("F", f_chunk(step)))
            continue
        if step < warm + fwd_bwd:
            out.append(op("F", f_chunk(step)))
        out.append(op("I", b_chunk(step)))
        backward_steps.append(step)
        if step - warm >= rank:
            out.append(op("W", b_chunk(backward_steps[w])))
            w += 1
    while w < len(backward_steps):
        out.append(op("W", b_chunk(backward_steps[w])))
        w += 1
    return tuple(out)


@lru_cache(maxsize=1024)
def zbv_order(pp: int, rank: int, m: int) -> tuple[Op, ...]:
    """ScheduleZBVZeroBubble (Qi et al. ICLR'24 §6 ZB-V; two chunks per rank, V placement):
    2(pp-rank)-1 chunk-0 forwards; rank times (chunk-1 F, chunk-0 F); pp-rank times
    (chunk-1 F, I, W); then (chunk-0 F while any remain, chunk-0 I W, chunk-1 F I W) until
    every forward ran; cool-down rank times (chunk-0 I, chunk-1 I), pp-rank times
    (chunk-0 I, W), the chunk-1 W's left, the chunk-0 W's left. torch plans for
    max(2pp-1, m) micro-batches and drops the ops of those beyond m."""
    n = max(2 * pp - 1, m)
    out: list[Op] = []
    f = [0, 0]
    b = [0, 0]

    def add(kind: str, chunk: int, mb: int) -> None:
        out.append((kind, mb, chunk))

    for _ in range(2 * (pp - rank) - 1):
        add("F", 0, f[0])
        f[0] += 1
    for _ in range(rank):
        add("F", 1, f[1])
        f[1] += 1
        add("F", 0, f[0])
        f[0] += 1
    for _ in range(pp - rank):
        add("F", 1, f[1])
        f[1] += 1
        add("I", 1, b[1])
        add("W", 1, b[1])
        b[1] += 1
    while f[1] < f[0] or f[0] < n:
        if f[0] < n:
            add("F", 0, f[0])
            f[0] += 1
        add("I", 0, b[0])
        add("W", 0, b[0])
        b[0] += 1
        add("F", 1, f[1])
        f[1] += 1
        add("I", 1, b[1])
        add("W", 1, b[1])
        b[1] += 1
    w = list(b)
    for _ in range(rank):
        add("I", 0, b[0])
        b[0] += 1
        add("I", 1, b[1])
        b[1] += 1
    for _ in range(pp - rank):
        add("I", 0, b[0])
        b[0] += 1
        add("W", 0, w[0])
        w[0] += 1
    while w[1] < b[1]:
        add("W", 1, w[1])
        w[1] += 1
    while w[0] < b[0]:
        add("W", 0, w[0])
        w[0] += 1
    return tuple(o for o in out if o[1] < m)


@lru_cache(maxsize=1024)
def dualpipev_order(pp: int, rank: int, m: int) -> tuple[Op, ...]:
    """ScheduleDualPipeV (DeepSeek-V3 report §3.2.1 DualPipe, the V form of
    deepseek-ai/DualPipe; torch needs m >= 2pp): 2(pp-rank-1) chunk-0 forwards; rank+1 times
    (chunk-0 F, chunk-1 F); pp-rank-1 times (chunk-1 I, the oldest pending W, chunk-1 F);
    m-2pp+rank+1 times (chunk-0 F with chunk-1 B, chunk-1 F with chunk-0 B; on the last rank
    the first pair is not overlapped); pp-rank-1 times (chunk-1 B, chunk-1 F with chunk-0 B);
    rank+1 times (chunk-1, chunk-0 backward: whole until the middle step, input-gradient
    after, the switch between the two on even ranks, before them on odd); pp-rank-1 times
    (pending W, chunk-0 backward); rank+1 pending W's. An overlapped pair runs its forward,
    then its whole backward (module docstring)."""
    if m < 2 * pp:
        raise ValueError(f"dualpipev needs at least 2*pp = {2 * pp} micro-batches, got {m}")
    out: list[Op] = []
    count: dict[tuple[str, int], int] = {}
    pending: list[tuple[int, int]] = []  # (chunk, micro-batch) of input-gradients awaiting W

    def add(kind: str, chunk: int) -> None:
        key = ("F", chunk) if kind == "F" else ("I", chunk)  # a whole B counts as an input-gradient
        mb = count.get(key, 0)
        count[key] = mb + 1
        out.append((kind, mb, chunk))
        if kind == "I":
            pending.append((chunk, mb))

    def weight() -> None:
        if pending:
            chunk, mb = pending.pop(0)
            out.append(("W", mb, chunk))

    for _ in range(2 * (pp - rank - 1)):
        add("F", 0)
    for _ in range(rank + 1):
        add("F", 0)
        add("F", 1)
    for _ in range(pp - rank - 1):
        add("I", 1)
        weight()
        add("F", 1)
    for _ in range(m - 2 * pp + rank + 1):
        add("F", 0)
        add("B", 1)
        add("F", 1)
        add("B", 0)
    for _ in range(pp - rank - 1):
        add("B", 1)
        add("F", 1)
        add("B", 0)
    steps = rank + 1
    zb = False
    for i in range(steps):
        if i == steps // 2 and rank % 2 == 1:
            zb = True
        add("I" if zb else "B", 1)
        if i == steps // 2 and rank % 2 == 0:
            zb = True
        add("I" if zb else "B", 0)
    for _ in range(pp - rank - 1):
        weight()
        add("I" if zb else "B", 0)
    for _ in range(rank + 1):
        weight()
    return tuple(out)
