"""Pipeline timeline: one row per pipeline rank, every forward / recompute / backward of
every micro-batch as a coloured block on a time axis in ms, sends and receives and the DP
sync in a thin lane under each row, idle time (the bubble) hatched.

The events come from the schedule simulator (cost_model/schedule_sim.py) re-run from the
plan's `schedule` block. A plan without that block (stored before it existed) is drawn from
its per-stage times with the backward taken as twice the forward (Narayanan et al. SC'21
§3.2: 2x the forward FLOPs), and the picture says so."""

from __future__ import annotations

from cost_model.schedule_sim import Event, Simulation, StageTimes, simulate

from ..schedule import simulation_of
from .common import as_dict
from .svg import COLORS, Svg, nice_ticks, tick_label

MAX_ROWS = 16  # all ranks up to this; beyond, the first, a middle and the last few
EDGE_ROWS = 3
MERGE_ABOVE = 1500  # events per row above which touching blocks of one phase are merged

ROW_H, LANE_H, ROW_GAP = 22.0, 6.0, 8.0
LEFT, RIGHT, TOP = 78.0, 90.0, 58.0


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
    return simulate(stages, pp, m, par.get("schedule", "1f1b"), vpp), False


def shown_ranks(pp: int) -> list[int | None]:
    """Rank ids to draw; None marks the gap row of ranks left out."""
    if pp <= MAX_ROWS:
        return list(range(pp))
    mid = pp // 2
    return [*range(EDGE_ROWS), None, mid, None, *range(pp - EDGE_ROWS, pp)]


def _merge(events: list[Event], px_per_s: float) -> list[tuple[Event, int]]:
    """Touching blocks of one phase narrower than a pixel become one block (count kept)."""
    out: list[tuple[Event, int]] = []
    for e in events:
        if out:
            last, n = out[-1]
            if last.phase == e.phase and abs(last.end_s - e.start_s) < 1e-12 and (e.end_s - e.start_s) * px_per_s < 1.0:
                out[-1] = (Event(last.rank, last.phase, last.micro_batch, last.stage, last.start_s, e.end_s, last.peer), n + 1)
                continue
        out.append((e, 1))
    return out


def timeline_svg(plan, width: float = 1000.0) -> str:
    plan = as_dict(plan)
    sim, exact = simulation_for(plan)
    rows = shown_ranks(sim.pp)
    plot_w = width - LEFT - RIGHT
    span = sim.step_time_s or 1.0
    px = plot_w / span
    row_step = ROW_H + LANE_H + ROW_GAP
    height = TOP + len(rows) * row_step + 52
    title = f"Pipeline timeline: {sim.schedule}, pp={sim.pp}" + (f", vpp={sim.vpp}" if sim.vpp > 1 else "") + f", {sim.num_micro_batches} micro-batches"
    svg = Svg(width, height, "timeline", title)
    svg.defs.append(
        '<pattern id="idle-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        f'<rect width="6" height="6" fill="{COLORS["idle"]}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#d0d0d0" stroke-width="2"/></pattern>'
    )
    svg.text(LEFT, 20, title, size=14, weight="600")
    note = f"simulated step {sim.step_time_s * 1e3:,.1f} ms"
    block = plan.get("schedule") or {}
    if block.get("formula_step_time_s"):
        note += f"  ·  closed form {block['formula_step_time_s'] * 1e3:,.1f} ms"
    if not exact:
        note += "  ·  approximate: backward = 2 x forward (plan has no schedule block)"
    svg.text(width - RIGHT, 20, note, size=11, anchor="end", fill=COLORS["muted"])
    svg.legend(LEFT, 40, [("forward", COLORS["forward"]), ("recompute", COLORS["recompute"]), ("backward", COLORS["backward"]),
                          ("send / recv", COLORS["send"]), ("DP sync", COLORS["dp_sync"]), ("optimizer", COLORS["optimizer"]),
                          ("idle (bubble)", "url(#idle-hatch)")])
    by_rank: dict[int, list[Event]] = {}
    for e in sim.events:
        by_rank.setdefault(e.rank, []).append(e)
    y = TOP
    for r in rows:
        if r is None:
            svg.text(LEFT - 10, y + ROW_H / 2 + 4, "⋮", size=14, anchor="end", fill=COLORS["muted"])
            svg.text(LEFT + 4, y + ROW_H / 2 + 4, "ranks not shown", size=10, fill=COLORS["muted"])
            y += row_step
            continue
        evs = sorted(by_rank.get(r, []), key=lambda e: (e.start_s, e.phase))
        main = [e for e in evs if e.phase in ("forward", "recompute", "backward", "optimizer")]
        lane = [e for e in evs if e.phase in ("send", "recv", "dp_sync")]
        merge = len(main) > MERGE_ABOVE
        busy = sum(e.end_s - e.start_s for e in main if e.phase != "optimizer")
        idle = sim.pipeline_time_s - busy
        svg.open(class_="rank", id=f"rank-{r}", data_rank=r)
        svg.text(LEFT - 10, y + ROW_H / 2 + 4, f"rank {r}", size=11, anchor="end")
        svg.rect(LEFT, y, sim.pipeline_time_s * px, ROW_H, "url(#idle-hatch)", cls="idle",
                 tooltip=f"rank {r}: idle {idle * 1e3:,.1f} ms in the pipeline phase")
        for e, n in (_merge(main, px) if merge else [(x, 1) for x in main]):
            w = (e.end_s - e.start_s) * px
            tip = f"rank {r} {e.phase}" + (f" micro-batch {e.micro_batch} stage {e.stage}" if e.micro_batch >= 0 else "")
            tip += f": {e.start_s * 1e3:,.2f}-{e.end_s * 1e3:,.2f} ms" + (f" ({n} blocks)" if n > 1 else "")
            svg.rect(LEFT + e.start_s * px, y, w, ROW_H, COLORS[e.phase], tooltip=tip, class_=f"op {e.phase}",
                     data_mb=e.micro_batch, data_stage=e.stage, data_count=n if n > 1 else None,
                     stroke="#ffffff" if w > 3 else None, stroke_width=0.5 if w > 3 else None)
            if n == 1 and e.micro_batch >= 0 and w > 16:
                svg.text(LEFT + e.start_s * px + w / 2, y + ROW_H / 2 + 4, str(e.micro_batch), size=9, anchor="middle", fill="#ffffff")
        for e, _n in (_merge(lane, px) if merge else [(x, 1) for x in lane]):
            tip = f"rank {r} {e.phase}" + (f" micro-batch {e.micro_batch} {'to' if e.phase == 'send' else 'from'} rank {e.peer}" if e.peer >= 0 else "")
            tip += f": {(e.end_s - e.start_s) * 1e3:,.3f} ms"
            svg.rect(LEFT + e.start_s * px, y + ROW_H + 1, max(0.6, (e.end_s - e.start_s) * px), LANE_H - 1, COLORS[e.phase],
                     tooltip=tip, class_=f"op {e.phase}", data_mb=e.micro_batch)
        frac = idle / sim.pipeline_time_s if sim.pipeline_time_s else 0.0
        svg.text(width - RIGHT + 8, y + ROW_H / 2 + 4, f"bubble {frac * 100:.1f}%", size=10, fill=COLORS["muted"])
        svg.close()
        y += row_step
    # time axis (ms)
    axis_y = y + 2
    svg.open(class_="axis")
    svg.line(LEFT, axis_y, LEFT + plot_w, axis_y, stroke=COLORS["muted"])
    for t in nice_ticks(span * 1e3):
        x = LEFT + t / 1e3 * px
        if x > LEFT + plot_w + 0.5:
            break
        svg.line(x, axis_y, x, axis_y + 4, stroke=COLORS["muted"])
        svg.line(x, TOP - 4, x, axis_y, stroke=COLORS["grid"], width=0.5, stroke_dasharray="2,3")
        svg.text(x, axis_y + 16, tick_label(t), size=10, anchor="middle", fill=COLORS["muted"])
    svg.text(LEFT + plot_w / 2, axis_y + 32, "time in the step (ms)", size=11, anchor="middle", fill=COLORS["muted"])
    svg.close()
    return svg.to_string()
