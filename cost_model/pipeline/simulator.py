"""Discrete-event simulation of one training step's pipeline schedule.

Input: per (virtual) stage, the time of one micro-batch's forward, backward, recomputation
and activation/gradient sends (`StageTimes`), plus each pipeline rank's step tail (exposed
data-parallel gradient sync, optimizer). Output: every forward, recompute, backward, send
and receive of every micro-batch on every pipeline rank, with start and end times, and the
step time they imply (`Simulation`).

Model of execution (the same one the closed form of stages.py prices):
- a pipeline rank is one stream: its compute ops and its sends run one after the other in
  the schedule's order (the cost model charges each stage's p2p sends to its rank's
  per-micro-batch time, stages.rank_cost);
- the forward of micro-batch i on stage s starts when rank(s) is free and stage s-1's send
  of i has ended; the backward of i on stage s starts when rank(s) is free and stage s+1's
  gradient send of i has ended (the last stage's backward follows its own forward);
- a fully recomputed block's forward is re-run right before its backward, once the gradient
  has arrived (torch.utils.checkpoint, which Megatron's full recompute uses, recomputes
  inside the backward call);
- after its last backward a rank's data-parallel gradient sync is exposed for
  `exposed_dp_s` (stages.RankCost.exposed_dp_s: the bucketed sync overlaps the last
  backward), then the optimizer step runs for `optimizer_s`.

Schedule orders (the per-rank op sequence; every op names (micro-batch, model chunk)):
- GPipe (Huang et al. 2019): all forwards, then all backwards in micro-batch order, as in
  torch 2.13.0 torch/distributed/pipelining/schedules.py ScheduleGPipe._step_microbatches
  (two loops over range(n_microbatches): forward_one_chunk, then backward_one_chunk).
- 1F1B (Narayanan et al. SC'21 §2.2, PipeDream-Flush): rank r runs p - r - 1 warm-up
  forwards, then alternates one forward and one backward, then drains the backwards.
- interleaved 1F1B (Narayanan et al. SC'21 §2.2; Megatron-LM
  megatron/core/pipeline_parallel/schedules.py at d98e8a64ddf34856e74b24714e3bedb2f5a39553:
  get_pp_rank_microbatches, get_schedule_table, get_model_chunk_id): the virtual micro-batch
  table walks groups of `group` micro-batches (microbatch_group_size_per_vp_stage, default
  pp) through chunk 0, 1, ..., v-1; rank r runs 2(p - r - 1) + (v - 1) * group warm-up
  forwards, then forward k + warm-up with backward k, then the remaining backwards;
  backward k takes micro-batch table[k] on chunk v - 1 - chunk(table[k]).
- zero-bubble family (zb1p, zbv, dualpipev): torch's orders (order.zb1p_order, zbv_order,
  dualpipev_order); an input-gradient op (I) runs recomputation and bwd_s - wgrad_s and sends
  the gradient on, a weight-gradient op (W) runs wgrad_s and depends only on its own I (the
  rank's order puts it later); a whole backward (B) runs both.
Virtual stage s = chunk * p + rank lives on rank s % p, as in stages.rank_cost; under the V
schedules chunk 1 of rank r is stage 2p-1-r (order.stage_rank).

Closed form versus simulation: stages.pipeline_time_s prices the same order. For uniform
stages the simulated pipeline time equals it, m*t + (p-1)*t/v (tests/cost_model/
test_schedule_sim.py checks a grid of pp, vpp and m). With uneven stages fast stages wait on
slow ones; the closed form is then an upper bound (for interleaving, the lock-step execution
of this order that stages.py describes), a few percent above the simulation for the
near-even partitions the planner picks. The plan's `step_time_s` is the closed form, what
the ILP optimises; the plan's `schedule` block carries the simulated step next to it, and
the reasons say when the two differ by more than 0.5%.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from cost_model.pipeline.order import rank_order, stage_of, stage_rank, warmup_forwards
from cost_model.specs.vocab import SPLIT_BACKWARD_SCHEDULES

# backward: the whole backward, or under the zero-bubble schedules its input-gradient part
# (B); wgrad: the weight-gradient part (W) those schedules run apart
Phase = Literal["forward", "recompute", "backward", "wgrad", "send", "recv", "dp_sync", "optimizer"]
PHASES: tuple[str, ...] = ("forward", "recompute", "backward", "wgrad", "send", "recv", "dp_sync", "optimizer")


@dataclass(frozen=True)
class StageTimes:
    """One (virtual) stage, one micro-batch. Times in seconds."""

    fwd_s: float  # forward compute + the forward share of exposed TP/CP/EP/ZeRO-3 comm
    bwd_s: float  # backward compute + the backward share of exposed comm
    recompute_s: float = 0.0  # re-run forward before the backward (activation recomputation)
    send_fwd_s: float = 0.0  # activations to the next stage (0 on the last stage)
    send_bwd_s: float = 0.0  # gradients to the previous stage (0 on the first stage)
    # overlapped 1F1B all-to-all: fwd_s / bwd_s are combined-step times, and a forward or a
    # backward outside the steady 1F1B pairs (warm-up, cool-down) takes this much longer
    unpaired_s: float = 0.0
    # of bwd_s: the weight-gradient GEMMs (LayerCost.wgrad_s), run as their own op (W) by the
    # zero-bubble schedules, after the input-gradient part (B = bwd_s - wgrad_s) has sent
    # its gradient on
    wgrad_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.recompute_s + self.send_fwd_s + self.send_bwd_s


@dataclass(frozen=True)
class RankTail:
    """What a pipeline rank does after its last backward, once per step."""

    exposed_dp_s: float = 0.0  # gradient sync not hidden behind the last backward
    optimizer_s: float = 0.0
    dp_sync_s: float = 0.0  # the whole sync (drawn overlapping the last backward)


class Event(NamedTuple):  # a tuple: a large schedule has p * v * m * 4 of them
    rank: int
    phase: str  # one of PHASES
    micro_batch: int  # -1 for the per-step tail
    stage: int  # virtual stage index; -1 for the tail
    start_s: float
    end_s: float
    peer: int = -1  # the other pipeline rank of a send/recv


@dataclass(frozen=True)
class Simulation:
    schedule: str
    pp: int
    vpp: int
    num_micro_batches: int
    events: tuple[Event, ...]
    pipeline_time_s: float  # last backward on any rank
    step_time_s: float  # last optimizer step on any rank
    busy_s: tuple[float, ...] = field(default=())  # per rank: forward+recompute+backward+send

    def rank_events(self, rank: int, phases: Sequence[str] | None = None) -> list[Event]:
        return [e for e in self.events if e.rank == rank and (phases is None or e.phase in phases)]

    @property
    def bubble_s(self) -> tuple[float, ...]:
        """Per rank: idle time inside the pipeline phase."""
        return tuple(self.pipeline_time_s - b for b in self.busy_s)


# --------------------------------------------------------------------------- simulation


def simulate(
    stages: Sequence[StageTimes],
    pp: int,
    num_micro_batches: int,
    schedule: str,
    vpp: int = 1,
    tails: Sequence[RankTail] | None = None,
    group: int | None = None,
    record: bool = True,
    warmup_extra: int = 0,
) -> Simulation:
    """Run the schedule; `stages` has pp * vpp entries, stage s on rank s % pp. With
    record=False only the times are kept (no events): what the plan's summary needs.
    Overlapped 1F1B all-to-all (`warmup_extra` 1, StageTimes.unpaired_s): Megatron's order
    with one more warm-up forward, each steady forward running combined with the backward
    after it; the forwards before the first backward and the backwards after the last
    forward run alone (+ unpaired_s)."""
    n_stages = len(stages)
    if n_stages != pp * max(1, vpp):
        raise ValueError(f"need pp*vpp = {pp * vpp} stage times, got {n_stages}")
    m = num_micro_batches
    v = max(1, vpp)
    orders = [rank_order(schedule, pp, r, m, v, group, warmup_extra) for r in range(pp)]
    # per rank, the span of its order the steady combined steps cover (after the warm-up
    # forwards, before the cool-down backwards)
    paired = []
    for r in range(pp):
        if schedule in SPLIT_BACKWARD_SCHEDULES:  # no combined steps: nothing runs "alone"
            paired.append(range(len(orders[r])))
            continue
        warm, total = warmup_forwards(schedule, pp, r, m, v, group, warmup_extra)
        paired.append(range(warm, warm + 2 * (total - warm)))
    pos = [0] * pp
    free = [0.0] * pp
    busy = [0.0] * pp
    fwd_ready: dict[tuple[int, int], float] = {}  # (stage, mb): activations arrived at `stage`
    bwd_ready: dict[tuple[int, int], float] = {}  # (stage, mb): gradient arrived at `stage`
    fwd_end: dict[tuple[int, int], float] = {}  # (stage, mb): forward finished on its own rank
    events: list[Event] | None = [] if record else None
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                kind, mb, chunk = orders[r][pos[r]]
                s = stage_of(r, chunk, pp, schedule)
                st = stages[s]
                if kind == "F":
                    dep = 0.0 if s == 0 else fwd_ready.get((s, mb))
                elif kind == "W":
                    dep = 0.0  # after its own input-gradient op, earlier in this rank's order
                elif s == n_stages - 1:
                    dep = fwd_end.get((s, mb))  # the loss: backward follows its own forward
                else:
                    dep = bwd_ready.get((s, mb))
                if dep is None:
                    break
                t = max(free[r], dep)
                extra = st.unpaired_s if pos[r] not in paired[r] else 0.0
                if kind == "F":
                    fwd = st.fwd_s + extra
                    if events is not None:
                        events.append(Event(r, "forward", mb, s, t, t + fwd))
                    t += fwd
                    fwd_end[(s, mb)] = t
                    if s < n_stages - 1:
                        t = _send(events, r, stage_rank(s + 1, pp, schedule), mb, s, t, st.send_fwd_s)
                        fwd_ready[(s + 1, mb)] = t
                    busy[r] += fwd + (st.send_fwd_s if s < n_stages - 1 else 0.0)
                elif kind == "W":
                    w = min(st.wgrad_s, st.bwd_s)
                    if events is not None:
                        events.append(Event(r, "wgrad", mb, s, t, t + w))
                    t += w
                    busy[r] += w
                else:
                    if st.recompute_s > 0:
                        if events is not None:
                            events.append(Event(r, "recompute", mb, s, t, t + st.recompute_s))
                        t += st.recompute_s
                    bwd = st.bwd_s + extra - (min(st.wgrad_s, st.bwd_s) if kind == "I" else 0.0)
                    if events is not None:
                        events.append(Event(r, "backward", mb, s, t, t + bwd))
                    t += bwd
                    if s > 0:
                        t = _send(events, r, stage_rank(s - 1, pp, schedule), mb, s, t, st.send_bwd_s)
                        bwd_ready[(s - 1, mb)] = t
                    busy[r] += st.recompute_s + bwd + (st.send_bwd_s if s > 0 else 0.0)
                free[r] = t
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {schedule!r} deadlocked (pp={pp}, vpp={vpp}, m={m})")
    pipe = max(free)
    tails = list(tails) if tails is not None else [RankTail()] * pp
    step = pipe
    for r in range(pp):
        tl = tails[r]
        end_b = free[r]
        if tl.dp_sync_s > 0 or tl.exposed_dp_s > 0:
            dp_end = end_b + tl.exposed_dp_s
            if events is not None:
                events.append(Event(r, "dp_sync", -1, -1, max(0.0, dp_end - max(tl.dp_sync_s, tl.exposed_dp_s)), dp_end))
            end_b = dp_end
        if tl.optimizer_s > 0:
            if events is not None:
                events.append(Event(r, "optimizer", -1, -1, end_b, end_b + tl.optimizer_s))
            end_b += tl.optimizer_s
        step = max(step, end_b)
    return Simulation(schedule, pp, v, m, tuple(events or ()), pipe, step, tuple(busy))


def _send(events: list[Event] | None, src: int, dst: int, mb: int, stage: int, t: float, dur: float) -> float:
    """A send on the sender's stream and the matching receive on the peer; returns its end."""
    if dur > 0 and events is not None:
        events.append(Event(src, "send", mb, stage, t, t + dur, dst))
        events.append(Event(dst, "recv", mb, stage, t, t + dur, src))
    return t + dur
