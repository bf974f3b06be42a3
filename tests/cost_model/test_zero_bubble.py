"""The zero-bubble family (zb1p, zbv, dualpipev): torch's own orders, the published bubble and
memory for equal F/B/W, the closed form against the simulation, and memory never under what
the order holds.

References: Qi et al., Zero Bubble Pipeline Parallelism (ICLR'24) §2.1 (ZB-H1: bubble
(p-1)(T_F+T_B-T_W), peak memory of 1F1B) and the authors' repository table (sail-sg/
zero-bubble-pipeline-parallelism README, T_F=T_B=T_W: ZB1P bubble rate (p-1)/3m, ZBV 0, both
1x 1F1B's activation memory); DeepSeek-V3 report Table 2 and deepseek-ai/DualPipe README
(B there the whole backward: 1F1B (PP-1)(F+B), ZB1P (PP-1)(F+B-2W), DualPipe(V)
(PP/2-1)(F&B+B-3W) with PP+1 stages' activations per device, PP stages on PP/2 devices for V).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_model.engines.support import engine_supports
from cost_model.pipeline.in_flight import live_chunk_vectors, peak_in_flight_bytes
from cost_model.pipeline.order import (
    dualpipev_order,
    rank_stages,
    split_schedule_rule,
    stage_rank,
    zb1p_order,
    zbv_order,
)
from cost_model.pipeline.simulator import StageTimes, simulate
from cost_model.pipeline.stages import pipeline_time_s

PPS = (2, 3, 4, 8)


def _uniform(p: int, v: int, f: float, b: float, w: float) -> list[StageTimes]:
    """Equal stages: forward f, input-gradient b, weight-gradient w (bwd_s = b + w)."""
    return [StageTimes(f, b + w, wgrad_s=w)] * (p * v)


def _bubble(sched: str, p: int, m: int, v: int, f: float, b: float, w: float) -> float:
    sim = simulate(_uniform(p, v, f, b, w), p, m, sched, v, record=False)
    return sim.pipeline_time_s - m * v * (f + b + w)


def _span_idle(sched: str, p: int, m: int, v: int, f: float, b: float, w: float) -> list[float]:
    """Per rank: idle time between its own first and last compute op (the papers' bubble of a
    rank, whose optimizer may start at its own end: ZB §4 optimizer post-validation)."""
    sim = simulate(_uniform(p, v, f, b, w), p, m, sched, v)
    out = []
    for r in range(p):
        ev = sim.rank_events(r, ("forward", "backward", "wgrad"))
        out.append(max(e.end_s for e in ev) - min(e.start_s for e in ev) - sum(e.end_s - e.start_s for e in ev))
    return out


def _peak_chunks(sched: str, p: int, m: int, v: int) -> int:
    """The most chunk-micro-batches any rank holds (one chunk = 1/v of a rank's layers)."""
    return max(max(map(sum, live_chunk_vectors(sched, p, r, m, v))) for r in range(p))


# --------------------------------------------------------------------------- torch's own orders

torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
_KIND = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}


def _torch_ops(ops, chunk_of: dict[int, int]) -> list[tuple[str, int, int]]:
    out = []
    for a in ops:
        if a is None:
            continue
        for x in a.sub_actions or (a,):  # DualPipeV's OVERLAP_F_B: its forward, then its backward
            out.append((_KIND[x.computation_type.name], x.microbatch_index, chunk_of[x.stage_index]))
    return out


@pytest.mark.parametrize("pp", (1, 2, 3, 4, 5))
def test_orders_are_torchs(pp):
    """order.py's orders equal torch's _calculate_single_rank_operations (padding dropped) for
    every rank, micro-batch count and (ZB1P) stages per rank torch accepts."""
    S = torch_schedules
    for m in range(1, 3 * pp + 3):
        rounds = max(1, m // pp)
        for v in (1, 2, 3):
            if m % rounds:
                continue
            me = SimpleNamespace(n_local_stages=v, microbatches_per_round=m // rounds, pp_group_size=pp,
                                 _n_microbatches=m)
            for r in range(pp):
                got = _torch_ops(S.ScheduleInterleavedZeroBubble._calculate_single_rank_operations(me, r),
                                 {c * pp + r: c for c in range(v)})
                assert got == list(zb1p_order(pp, r, m, v)), (pp, m, v, r)
        me = SimpleNamespace(pp_group_size=pp, _n_microbatches=m, num_stages=2 * pp)
        for r in range(pp):
            v_chunks = {s: c for c, s in enumerate(rank_stages(r, pp, 2, "zbv"))}
            assert v_chunks == {r: 0, 2 * pp - 1 - r: 1}
            assert _torch_ops(S.ScheduleZBVZeroBubble._calculate_single_rank_operations(me, r), v_chunks) \
                == list(zbv_order(pp, r, m)), (pp, m, r)
            if m >= 2 * pp:
                assert _torch_ops(S.ScheduleDualPipeV._calculate_single_rank_operations(me, r), v_chunks) \
                    == list(dualpipev_order(pp, r, m)), (pp, m, r)


def test_v_placement_is_torchs():
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    for pp in PPS:
        want = generate_stage_to_rank_mapping(pp, 2 * pp, style="v")
        assert {s: stage_rank(s, pp, "zbv") for s in range(2 * pp)} == want


# --------------------------------------------------------------------------- published tables


@pytest.mark.parametrize("p", PPS)
def test_published_bubbles_equal_fbw(p):
    m = 4 * p
    f = b = w = 1.0
    full_b = b + w  # DeepSeek-V3 Table 2's B: the whole backward
    assert _bubble("1f1b", p, m, 1, f, b + w, 0.0) == pytest.approx((p - 1) * (f + full_b))
    zb1p = (p - 1) * (f + full_b - 2 * w)
    assert _bubble("zb1p", p, m, 1, f, b, w) == pytest.approx(zb1p)
    assert zb1p == pytest.approx((p - 1) * (f + full_b) / 3)  # the README's (p-1)/3m bubble rate
    # ZBV: no rank idles between its first and its last op (the README's bubble rate 0); the
    # pipeline still starts rank p-1 (p-1) chunk forwards late
    assert max(_span_idle("zbv", p, m, 2, f, b, w)) == pytest.approx(0.0, abs=1e-9)
    assert _bubble("zbv", p, m, 2, f, b, w) == pytest.approx((p - 1) * f)
    # DualPipeV, torch's order (an OVERLAP_F_B pair run one after the other, F&B = F + B):
    # within the DualPipe README's (PP/2-1)(F&B+B-3W) for PP = 2p stages on p devices
    dualpipe = (p - 1) * ((f + full_b) + full_b - 3 * w)
    got = _bubble("dualpipev", p, m, 2, f, b, w)
    assert got <= dualpipe + 1e-9
    assert got == pytest.approx((p - 1) * f)  # measured: torch's order leaves one chunk forward per hop


@pytest.mark.parametrize("p", PPS)
def test_zb1p_bubble_is_zb_h1_for_unequal_times(p):
    """Qi et al. §2.1's (p-1)(T_F + T_B - T_W) wherever the W's fill the gaps (w <= f, b)."""
    for f, b, w in ((1.0, 1.3, 0.7), (1.0, 2.0, 1.0), (2.0, 1.0, 0.5)):
        assert _bubble("zb1p", p, 4 * p, 1, f, b, w) == pytest.approx((p - 1) * (f + b - w))


@pytest.mark.parametrize("p", PPS)
def test_published_activation_memory(p):
    m = 4 * p
    one_f_one_b = _peak_chunks("1f1b", p, m, 1)
    assert one_f_one_b == p
    assert _peak_chunks("zb1p", p, m, 1) == p  # 1x 1F1B (ZB-H1, README table)
    # ZBV: 2p chunk-micro-batches of half a rank's layers each = 1x 1F1B's p micro-batches
    assert _peak_chunks("zbv", p, m, 2) == 2 * p
    # DualPipeV: PP + 1 stages' activations per device, PP = 2p stages
    assert _peak_chunks("dualpipev", p, m, 2) == 2 * p + 1


@pytest.mark.parametrize("p", PPS)
def test_dualpipev_within_published_bound_for_unequal_times(p):
    for f, b, w in ((1.0, 2.0, 1.0), (1.0, 1.0, 0.2), (2.0, 1.0, 1.0), (0.5, 1.0, 1.0)):
        full_b = b + w
        assert _bubble("dualpipev", p, 4 * p, 2, f, b, w) <= (p - 1) * ((f + full_b) + full_b - 3 * w) + 1e-9


# --------------------------------------------------------------------------- the paper's form vs the simulation


def _priced(stages: list[StageTimes], p: int, m: int) -> float:
    return pipeline_time_s([[s.fwd_s] for s in stages], [[s.bwd_s] for s in stages], m, 1, "zb1p",
                           chunk_wgrad_s=[[s.wgrad_s] for s in stages])


def _zb_h1(f: float, b: float, w: float, p: int, m: int) -> float:
    """Qi et al. ICLR'24 §2.1 ZB-H1 on equal stages, b the input gradient: m (f + b + w) of work
    and a bubble of (p-1)(f + b - w) while w fills it (w <= f, b), (p-1) max(f, b) beyond."""
    return m * (f + b + w) + (p - 1) * max(f + b - w, f, b)


times = st.floats(0.1, 3.0)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 8), k=st.sampled_from((1, 2, 3, 4)), f=times, b=times, w=times)
def test_zb1p_simulation_is_the_papers_form_on_equal_stages(p, k, f, b, w):
    """On equal stages the simulated torch order takes exactly the paper's time, any F, B, W."""
    m = k * p
    stages = _uniform(p, 1, f, b, w)
    sim = simulate(stages, p, m, "zb1p", 1, record=False).pipeline_time_s
    assert sim == pytest.approx(_zb_h1(f, b, w, p, m), rel=1e-9)
    assert _priced(stages, p, m) == pytest.approx(sim, rel=1e-12)


def test_zb1p_uneven_stages_are_priced_by_the_simulation():
    """On uneven stages no short form bounds the schedule: a case found at random, where the
    weight gradients exceed the input gradients, runs 2% longer than the paper's form on its
    slowest stage's times plus the stages' imbalance (the short form this model once used).
    The priced time is the simulation's."""
    stages = [StageTimes(2.559, 3.848, wgrad_s=3.102), StageTimes(3.454, 2.906, wgrad_s=2.154),
              StageTimes(2.26, 4.144, wgrad_s=3.339)]
    p, m = 3, 3
    t = [s.fwd_s + s.bwd_s for s in stages]
    F, B, W = max(s.fwd_s for s in stages), max(s.bwd_s - s.wgrad_s for s in stages), min(s.wgrad_s for s in stages)
    short = m * max(t) + (p - 1) * max(F + B - W, F, B) + sum(max(t) - x for x in t)
    sim = simulate(stages, p, m, "zb1p", 1, record=False).pipeline_time_s
    assert sim > short * 1.015
    assert _priced(stages, p, m) == pytest.approx(sim, rel=1e-12)


def test_v_schedules_priced_as_simulated():
    """zbv and dualpipev have no short form: pipeline_time_s is the simulation of torch's order."""
    p, m = 4, 8
    fwd = [[1.0, 1.1] for _ in range(p)]
    bwd = [[2.0, 2.4] for _ in range(p)]
    wg = [[0.9, 1.0] for _ in range(p)]
    for sched in ("zbv", "dualpipev"):
        stages = [None] * (2 * p)
        for r in range(p):
            for c, s in enumerate(rank_stages(r, p, 2, sched)):
                stages[s] = StageTimes(fwd[r][c], bwd[r][c], wgrad_s=wg[r][c])
        sim = simulate(stages, p, m, sched, 2, record=False).pipeline_time_s
        assert pipeline_time_s(fwd, bwd, m, 2, sched, chunk_wgrad_s=wg) == pytest.approx(sim)


# --------------------------------------------------------------------------- memory never under


@pytest.mark.parametrize(("sched", "v"), [("zb1p", 1), ("zb1p", 2), ("zbv", 2), ("dualpipev", 2)])
def test_priced_activations_cover_the_simulated_holding(sched, v):
    """Walk the simulated events in time: a micro-batch's bytes on a stage are held from its
    forward's start to its weight-gradient op's (or whole backward's) end; the priced peak
    (in_flight.peak_in_flight_bytes) is never below that walk's peak."""
    p, m = 4, 8
    stages = _uniform(p, v, 1.0, 1.2, 0.8)
    sim = simulate(stages, p, m, sched, v)
    for r in range(p):
        chunk_bytes = tuple(10.0 + 3 * c for c in range(v))  # unequal chunks
        chunk_of = {s: c for c, s in enumerate(rank_stages(r, p, v, sched))}
        marks = []
        for e in sim.rank_events(r, ("forward", "backward", "wgrad")):
            a = chunk_bytes[chunk_of[e.stage]]
            if e.phase == "forward":
                marks.append((e.start_s, 1, a))
            elif e.phase == "wgrad" or sched == "dualpipev":
                # a whole backward (DualPipeV's B) frees too; an input-gradient op does not
                frees = e.phase == "wgrad" or not any(
                    x.phase == "wgrad" and x.stage == e.stage and x.micro_batch == e.micro_batch
                    for x in sim.rank_events(r, ("wgrad",)))
                if frees:
                    marks.append((e.end_s, 0, -a))
        held = peak = 0.0
        for _, _, d in sorted(marks):
            held += d
            peak = max(peak, held)
        assert peak_in_flight_bytes(sched, p, r, m, v, chunk_bytes) >= peak - 1e-9, r


# --------------------------------------------------------------------------- rules


def test_torch_rules_and_engines():
    assert split_schedule_rule("zbv", 4, 1, 8) is not None  # exactly 2 stages per rank
    assert split_schedule_rule("dualpipev", 4, 2, 7) is not None  # m >= 2pp
    assert split_schedule_rule("zb1p", 4, 1, 6) is None and split_schedule_rule("zb1p", 4, 1, 9) is not None
    assert engine_supports("megatron", schedule="zbv", pp=4, vpp=2) is not None
    assert engine_supports("deepspeed", schedule="zb1p", pp=4, vpp=1) is not None
    assert engine_supports("torchtitan", schedule="zb1p", pp=4, vpp=1) is not None  # >= 2 stages per rank
    for sched, v in (("zb1p", 2), ("zbv", 2), ("dualpipev", 2)):
        assert engine_supports("torchtitan", schedule=sched, pp=4, vpp=v) is None
        assert engine_supports("runtime", schedule=sched, pp=4, vpp=v) is None
    assert engine_supports("runtime", schedule="zb1p", pp=4, vpp=1) is None
