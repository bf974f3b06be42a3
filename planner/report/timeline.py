"""Pipeline timeline: one row per pipeline rank, every forward / recompute / backward (under
the zero-bubble schedules its input-gradient part B and its weight-gradient part W apart) of
every micro-batch as a coloured block on a time axis in ms, sends and receives and the DP
sync in a thin lane under each row, idle time (the bubble) hatched.

Past FOLD_AFTER micro-batches every block would be a sliver (a barcode), so the steady state
is folded: the picture keeps the warm-up, one steady-state period (one micro-batch per rank
with 1F1B, a group of pp micro-batches with the interleaved order) and the cool-down, and
cuts a whole number of periods out of the middle, drawn as a marker labelled "x N". The cut
is exact: the blocks either side keep their simulated times (tooltips and the time axis are
in real time, the axis jumps at the marker), and each rank's bubble figure is the whole
step's. GPipe has two steady phases (all forwards, then all backwards) and is not folded;
its long schedules are drawn in bins (below).

The events come from the schedule simulator (cost_model/pipeline/simulator.py) re-run from the
plan's `schedule` block. A plan without that block (stored before it existed) is drawn from
its per-stage times with the backward taken as twice the forward (Narayanan et al. SC'21
§3.2: 2x the forward FLOPs), and the picture says so."""

from __future__ import annotations

from typing import NamedTuple

from cost_model.pipeline.order import zb1p_rounds
from cost_model.pipeline.simulator import Event, Simulation, StageTimes, simulate
from cost_model.specs.vocab import (
    SCHEDULE_1F1B,
    SCHEDULE_GPIPE,
    SCHEDULE_INTERLEAVED,
    SCHEDULE_ZB1P,
    SPLIT_BACKWARD_SCHEDULES,
)
from planner.report.common import as_dict
from planner.report.svg import COLORS, Svg, nice_ticks, tick_label
from planner.schedule import simulation_of

MAX_ROWS = 16  # all ranks up to this; beyond, the first, a middle and the last few
EDGE_ROWS = 3
BIN_PX = 2.0  # when blocks average under this width, a row is drawn in bins of this width
SMOOTH = 0.12  # bins whose phase shares differ by at most this are drawn as one run
WINDOW = 5  # bins in the moving average of the shares

FOLD_AFTER = 16  # micro-batches drawn in full up to this many; beyond, the steady state is folded
FOLD_PX = 34.0  # width of the fold marker
COMPUTE = ("forward", "recompute", "backward", "wgrad")

ROW_H, LANE_H, ROW_GAP = 22.0, 6.0, 8.0
LEFT, RIGHT, TOP = 78.0, 90.0, 76.0


def simulation_for(plan: dict) -> tuple[Simulation, bool]:
    """(simulation, exact): exact is False when drawn from the per-stage times alone."""
    block = plan.get("schedule")
    if block and block.get("stages"):
        return simulation_of(block), True
    par = plan["parallelism"]
    pp, vpp = par.get("pp", 1), par.get("vpp", 1)
    stages = []
    for s in plan["stages"]:
        t = s["time_ms"] / 1e3
        stages.append(StageTimes(t / 3, 2 * t / 3))
    m = par.get("num_micro_batches", 1)
    return simulate(stages, pp, m, par.get("schedule", SCHEDULE_1F1B), vpp), False


class Fold(NamedTuple):
    """The steady-state interval [cut_s, resume_s) left out of the picture: `micro_batches`
    micro-batches' worth of steady state, `periods` repeats of the period drawn before it."""

    cut_s: float
    resume_s: float
    gap_s: float  # the marker's width, in drawn seconds
    periods: int
    micro_batches: int

    def drawn(self, t: float) -> float:
        """Real time -> position on the drawn (folded) time line."""
        return t if t <= self.cut_s else self.cut_s + self.gap_s + max(0.0, t - self.resume_s)

    def real(self, t: float) -> float:
        """Drawn time line -> real time (the inverse of drawn, outside the marker)."""
        return t if t <= self.cut_s else self.resume_s + max(0.0, t - self.cut_s - self.gap_s)


def steady_period_s(sim: Simulation) -> float:
    """One micro-batch of steady state: the busiest rank's compute per micro-batch (in the
    steady state every rank runs at the busiest one's pace)."""
    busy = [0.0] * sim.pp
    for e in sim.events:
        if e.phase in COMPUTE:
            busy[e.rank] += e.end_s - e.start_s
    return max(busy) / max(1, sim.num_micro_batches)


def fold_for(sim: Simulation, plot_w: float, fold: bool = True) -> Fold | None:
    """Where to fold: after the warm-up (every rank has run its first backward) and one
    period, up to where the first rank starts its cool-down (its last forward has ended), a
    whole number of periods. None when the schedule is short enough to draw in full, is
    GPipe, or the steady state is under two periods."""
    if not fold or sim.num_micro_batches <= FOLD_AFTER or sim.schedule == SCHEDULE_GPIPE:
        return None
    # micro-batches in one period: a group through every chunk under the looped orders, one
    # under 1F1B, ZB1P with one stage per rank and the V orders (one micro-batch's F, B, W of
    # both chunks per steady step: order.zbv_order, dualpipev_order)
    group = 1
    if sim.schedule == SCHEDULE_INTERLEAVED:
        group = sim.pp
    elif sim.schedule == SCHEDULE_ZB1P and sim.vpp > 1:
        group = zb1p_rounds(sim.pp, sim.num_micro_batches)[1]
    period = steady_period_s(sim) * group
    first_bwd: dict[int, float] = {}
    last_fwd: dict[int, float] = {}
    for e in sim.events:
        if e.phase == "backward":
            first_bwd[e.rank] = min(first_bwd.get(e.rank, e.start_s), e.start_s)
        elif e.phase == "forward":
            last_fwd[e.rank] = max(last_fwd.get(e.rank, e.end_s), e.end_s)
    if period <= 0 or not first_bwd or not last_fwd:
        return None
    cut = max(first_bwd.values()) + period
    periods = int((min(last_fwd.values()) - cut) / period)
    if periods < 2:
        return None
    left_out = periods * period
    gap = FOLD_PX * (sim.step_time_s - left_out) / (plot_w - FOLD_PX)  # FOLD_PX wide at the drawn scale
    return Fold(cut, cut + left_out, gap, periods, periods * group)


def folded_events(events: list[Event], fold: Fold) -> list[Event]:
    """The events on the drawn time line: those inside the cut dropped, those across an
    edge of it clipped at the edge, those after it moved left by the cut."""
    out = []
    for e in events:
        if e.end_s <= fold.cut_s:
            out.append(e)
            continue
        if e.start_s < fold.cut_s:
            out.append(e._replace(end_s=fold.cut_s))
        if e.end_s > fold.resume_s:
            out.append(e._replace(start_s=fold.drawn(max(e.start_s, fold.resume_s)), end_s=fold.drawn(e.end_s)))
    return out


def shown_ranks(pp: int) -> list[int | None]:
    """Rank ids to draw; None marks the gap row of ranks left out."""
    if pp <= MAX_ROWS:
        return list(range(pp))
    mid = pp // 2
    return [*range(EDGE_ROWS), None, mid, None, *range(pp - EDGE_ROWS, pp)]


def _binned(events: list[Event], phases: tuple[str, ...], px_per_s: float, span_s: float) -> list[tuple[float, float, dict[str, float]]]:
    """Sub-pixel blocks as bins of BIN_PX: per bin the share of its time in each phase
    (a moving average over WINDOW bins); neighbouring bins within SMOOTH of the run's first
    bin merge into one run showing the run's mean shares. Returns (start_s, end_s, {phase: share})."""
    width_s = BIN_PX / px_per_s
    n = max(1, int(span_s / width_s) + 1)
    acc = [dict.fromkeys(phases, 0.0) for _ in range(n)]
    for e in events:
        a, b = e.start_s, e.end_s
        k = int(a / width_s)
        while a < b and k < n:
            edge = min(b, (k + 1) * width_s)
            acc[k][e.phase] += edge - a
            a, k = edge, k + 1
    # a short moving average: a bin holds a fraction of a forward-backward pair, so raw
    # shares beat with the bin grid; averaged over WINDOW bins the steady state is flat
    half = WINDOW // 2
    raw = [{p: v / width_s for p, v in seconds.items()} for seconds in acc]
    smooth = []
    for k in range(n):
        lo, hi = max(0, k - half), min(n, k + half + 1)
        # an idle bin stays idle (the bubble's edges stay sharp)
        if not any(raw[k].values()):
            smooth.append(raw[k])
            continue
        smooth.append({p: sum(raw[j][p] for j in range(lo, hi)) / (hi - lo) for p in phases})
    runs: list[list] = []  # [first bin, last bin, first shares, summed shares]
    for k, shares in enumerate(smooth):
        if runs and all(abs(shares[p] - runs[-1][2][p]) <= SMOOTH for p in phases):
            run = runs[-1]
            run[1] = k
            for p in phases:
                run[3][p] += shares[p]
        else:
            runs.append([k, k, shares, dict(shares)])
    out = []
    for first, last, _, total in runs:
        mean = {p: v / (last - first + 1) for p, v in total.items()}
        if any(v > 0.01 for v in mean.values()):
            out.append((first * width_s, (last + 1) * width_s, mean))
    return out


def timeline_title(sim: Simulation, fold: Fold | None) -> str:
    """What the picture draws: the schedule and its sizes, and when folded, what is kept."""
    head = f"Pipeline timeline: {sim.schedule}, pp={sim.pp}" + (f", vpp={sim.vpp}" if sim.vpp > 1 else "")
    if fold is None:
        return f"{head}, all {sim.num_micro_batches} micro-batches"
    return f"{head}, {sim.num_micro_batches} micro-batches: warm-up, 1 period, × {fold.periods} folded, cool-down"


def timeline_svg(plan, width: float = 1000.0, fold: bool = True) -> str:
    """The timeline picture; `fold=False` draws every micro-batch even past FOLD_AFTER."""
    plan = as_dict(plan)
    sim, exact = simulation_for(plan)
    rows = shown_ranks(sim.pp)
    plot_w = width - LEFT - RIGHT
    cut = fold_for(sim, plot_w, fold)
    span = (cut.drawn(sim.step_time_s) if cut else sim.step_time_s) or 1.0  # drawn seconds
    px = plot_w / span
    row_step = ROW_H + LANE_H + ROW_GAP
    height = TOP + len(rows) * row_step + 52
    title = timeline_title(sim, cut)
    svg = Svg(width, height, "timeline", title)
    svg.defs.append(
        '<pattern id="idle-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        f'<rect width="6" height="6" fill="{COLORS["idle"]}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#d0d0d0" stroke-width="2"/></pattern>'
    )
    svg.text(LEFT, 20, title, size=14, weight="600")
    svg.text(LEFT, 38, _note(plan, sim, exact, cut), size=11, fill=COLORS["muted"])
    split = sim.schedule in SPLIT_BACKWARD_SCHEDULES
    backward = [("backward: input grad (B)", COLORS["backward"]), ("weight grad (W)", COLORS["wgrad"])] if split \
        else [("backward", COLORS["backward"])]
    svg.legend(LEFT, 58, [("forward", COLORS["forward"]), ("recompute", COLORS["recompute"]), *backward,
                          ("send / recv", COLORS["send"]), ("DP sync", COLORS["dp_sync"]), ("optimizer", COLORS["optimizer"]),
                          ("idle (bubble)", "url(#idle-hatch)")])
    by_rank: dict[int, list[Event]] = {}
    for e in sim.events:
        by_rank.setdefault(e.rank, []).append(e)
    real = cut.real if cut else (lambda t: t)
    pipeline_end = cut.drawn(sim.pipeline_time_s) if cut else sim.pipeline_time_s
    y = TOP
    for r in rows:
        if r is None:
            svg.text(LEFT - 10, y + ROW_H / 2 + 4, "⋮", size=14, anchor="end", fill=COLORS["muted"])
            svg.text(LEFT + 4, y + ROW_H / 2 + 4, "ranks not shown", size=10, fill=COLORS["muted"])
            y += row_step
            continue
        evs = sorted(by_rank.get(r, []), key=lambda e: (e.start_s, e.phase))
        if cut:
            evs = folded_events(evs, cut)
        main = [e for e in evs if e.phase in ("forward", "recompute", "backward", "wgrad", "optimizer")]
        lane = [e for e in evs if e.phase in ("send", "recv", "dp_sync")]
        idle = sim.bubble_s[r]  # not computing and not sending, inside the pipeline phase
        svg.open(class_="rank", id=f"rank-{r}", data_rank=r)
        svg.text(LEFT - 10, y + ROW_H / 2 + 4, f"rank {r}", size=11, anchor="end")
        svg.rect(LEFT, y, pipeline_end * px, ROW_H, "url(#idle-hatch)", class_="idle",
                 tooltip=f"rank {r}: idle {idle * 1e3:,.1f} ms in the pipeline phase")
        if main and len(main) * BIN_PX > plot_w:
            _draw_binned(svg, r, y, main, lane, px, span)
        else:
            _draw_blocks(svg, r, y, main, lane, px, sim.pp, sim.vpp, real)
        frac = idle / sim.pipeline_time_s if sim.pipeline_time_s else 0.0
        svg.text(width - RIGHT + 8, y + ROW_H / 2 + 4, f"bubble {frac * 100:.1f}%", size=10, fill=COLORS["muted"])
        svg.close()
        y += row_step
    if cut:
        _draw_fold(svg, cut, px, y - ROW_GAP)
    _draw_axis(svg, sim.step_time_s, cut, px, plot_w, y + 2)
    return svg.to_string()


def _note(plan: dict, sim: Simulation, exact: bool, cut: Fold | None) -> str:
    """The line under the title: simulated and closed-form step, what one folded period is,
    and what is approximate."""
    note = f"simulated step {sim.step_time_s * 1e3:,.1f} ms"
    if cut:
        group = cut.micro_batches // cut.periods
        note += f"  ·  1 period = {group} micro-batch{'es' if group > 1 else ''} of steady state"
    block = plan.get("schedule") or {}
    if block.get("formula_step_time_s"):
        note += f"  ·  closed form {block['formula_step_time_s'] * 1e3:,.1f} ms"
    if not exact:
        note += "  ·  approximate: backward = 2 x forward (plan has no schedule block)"
    if sim.vpp > 1:
        note += "  ·  lighter: later model chunks"
    return note


def _draw_fold(svg: Svg, cut: Fold, px: float, bottom: float) -> None:
    """The marker where the steady state is cut out: a white band across every row with a
    broken-axis zigzag at each edge, labelled with the periods it stands for."""
    x0 = LEFT + cut.cut_s * px
    w = cut.gap_s * px
    tip = (f"steady state folded: {cut.micro_batches} micro-batches ({cut.periods} periods like the one before), "
           f"{cut.cut_s * 1e3:,.1f}-{cut.resume_s * 1e3:,.1f} ms")
    svg.open(class_="fold", data_periods=cut.periods, data_micro_batches=cut.micro_batches)
    svg.rect(x0, TOP - 6, w, bottom - TOP + 6, "#ffffff", tooltip=tip, class_="fold-band")
    for edge in (x0 + 3, x0 + w - 3):
        zig = " ".join(f"{'M' if i == 0 else 'L'}{edge + (2.5 if i % 2 else -2.5):.2f},{TOP - 6 + i * 6:.2f}"
                       for i in range(int((bottom - TOP + 6) / 6) + 1))
        svg.path(zig, COLORS["muted"], width=1.0)
    svg.text(x0 + w / 2, TOP - 10, f"× {cut.periods}", size=11, anchor="middle", weight="600", class_="fold-label")
    svg.close()


def _ticks_ms(step_s: float, cut: Fold | None, px: float) -> list[float]:
    """Round tick times (ms) about 6 to the drawn width; with a fold, the multiples of that
    step before the cut and after the resume, none within 40% of a step of the marker."""
    if cut is None:
        return nice_ticks(step_s * 1e3)
    ticks = nice_ticks(cut.drawn(step_s) * 1e3)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else step_s * 1e3
    cut_ms, resume_ms = cut.cut_s * 1e3, cut.resume_s * 1e3
    k_end = int(step_s * 1e3 / step) + 1
    return [k * step for k in range(k_end + 1)
            if k * step <= cut_ms - 0.4 * step or resume_ms + 0.4 * step <= k * step <= step_s * 1e3 + 1e-9]


def _draw_axis(svg: Svg, step_s: float, cut: Fold | None, px: float, plot_w: float, axis_y: float) -> None:
    """Time axis in real ms: ticks inside the fold are left out, so the axis jumps there."""
    svg.open(class_="axis")
    svg.line(LEFT, axis_y, LEFT + plot_w, axis_y, stroke=COLORS["muted"])
    for t in _ticks_ms(step_s, cut, px):
        x = LEFT + (cut.drawn(t / 1e3) if cut else t / 1e3) * px
        if x > LEFT + plot_w + 0.5:
            break
        svg.line(x, axis_y, x, axis_y + 4, stroke=COLORS["muted"])
        svg.line(x, TOP - 4, x, axis_y, stroke=COLORS["grid"], width=0.5, stroke_dasharray="2,3")
        svg.text(x, axis_y + 16, tick_label(t), size=10, anchor="middle", fill=COLORS["muted"])
    label = "time in the step (ms)" + ("; the axis jumps over the folded steady state" if cut else "")
    svg.text(LEFT + plot_w / 2, axis_y + 32, label, size=11, anchor="middle", fill=COLORS["muted"])
    svg.close()


def _draw_blocks(svg: Svg, r: int, y: float, main: list[Event], lane: list[Event], px: float, pp: int = 1, vpp: int = 1,
                 real=lambda t: t) -> None:
    """One rect per forward / recompute / backward / optimizer, one per send / recv / sync.
    With virtual stages, later model chunks of a rank are drawn lighter. Events are on the
    drawn time line; `real` maps it back for the tooltips."""
    for e in main:
        w = (e.end_s - e.start_s) * px
        chunk = e.stage // pp if e.stage >= 0 else 0
        opacity = 1.0 - 0.5 * chunk / (vpp - 1) if vpp > 1 else None
        tip = f"rank {r} {e.phase}" + (f" micro-batch {e.micro_batch} stage {e.stage}" if e.micro_batch >= 0 else "")
        tip += f" (chunk {chunk})" if vpp > 1 and e.stage >= 0 else ""
        tip += f": {real(e.start_s) * 1e3:,.2f}-{real(e.end_s) * 1e3:,.2f} ms"
        svg.rect(LEFT + e.start_s * px, y, w, ROW_H, COLORS[e.phase], tooltip=tip, class_=f"op {e.phase}",
                 data_mb=e.micro_batch, data_stage=e.stage, fill_opacity=opacity,
                 stroke="#ffffff" if w > 3 else None, stroke_width=0.5 if w > 3 else None)
        if e.micro_batch >= 0 and w > 16:
            svg.text(LEFT + e.start_s * px + w / 2, y + ROW_H / 2 + 4, str(e.micro_batch), size=9, anchor="middle", fill="#ffffff")
    for e in lane:
        tip = f"rank {r} {e.phase}" + (f" micro-batch {e.micro_batch} {'to' if e.phase == 'send' else 'from'} rank {e.peer}" if e.peer >= 0 else "")
        tip += f": {(e.end_s - e.start_s) * 1e3:,.3f} ms"
        svg.rect(LEFT + e.start_s * px, y + ROW_H + 1, max(0.6, (e.end_s - e.start_s) * px), LANE_H - 1, COLORS[e.phase],
                 tooltip=tip, class_=f"op {e.phase}", data_mb=e.micro_batch)


def _draw_binned(svg: Svg, r: int, y: float, main: list[Event], lane: list[Event], px: float, span: float) -> None:
    """Blocks narrower than BIN_PX on average: each bin stacks its phases by time share
    (forward on top, then recompute, backward), so the steady state reads as bands and the
    bubble stays visible; the lane shows where sends, receives and the sync happen."""
    order = ("forward", "recompute", "backward", "wgrad", "optimizer")
    n_blocks = {p: sum(e.phase == p for e in main) for p in order}
    for a, b, shares in _binned(main, order, px, span):
        top = y
        for p in order:
            h = shares[p] * ROW_H
            if h <= 0:
                continue
            svg.rect(LEFT + a * px, top, (b - a) * px, h, COLORS[p], class_=f"op {p} binned",
                     tooltip=f"rank {r} {p}: {shares[p] * 100:.0f}% of {a * 1e3:,.1f}-{b * 1e3:,.1f} ms "
                             f"({n_blocks[p]} blocks on this rank)")
            top += h
    for a, b, shares in _binned(lane, ("send", "recv", "dp_sync"), px, span):
        phase = max(shares, key=shares.get)
        svg.rect(LEFT + a * px, y + ROW_H + 1, (b - a) * px, LANE_H - 1, COLORS[phase], class_=f"op {phase} binned")
