"""Scaling: a sweep (planner/sweep.py) drawn as step time, tokens/s and MFU against the
swept GPU count or global batch, with the degrees the planner chose at each point. Points
without a feasible plan are marked on the axis and listed with the reason.

The swept axis is log2 (sweeps double the GPUs or the batch: doublings are equal steps, and
a value between two doublings sits where its logarithm does); every number is written with
svg.fmt_num, the page's one number format."""

from __future__ import annotations

import math

from planner.report.common import degrees, knobs
from planner.report.svg import COLORS, Svg, fmt_num, nice_ticks, tick_label, wrap

PANELS = (
    ("step_time_s", "step time (s)", COLORS["forward"]),
    ("tokens_per_s", "tokens/s", COLORS["dp_sync"]),
    ("mfu", "MFU (%)", COLORS["backward"]),
)
AXIS_LABEL = {"num_gpus": "GPUs", "global_batch_size": "global batch (sequences)"}
PAD = 0.08  # of a panel's width, left empty at each end of the swept axis


def log2_positions(values: list[float]) -> list[float]:
    """Each swept value's place along the axis in [PAD, 1 - PAD], by its log2: doublings are
    equal steps. One value (or all equal) sits in the middle."""
    logs = [math.log2(v) for v in values]
    lo, hi = min(logs), max(logs)
    if hi - lo < 1e-12:
        return [0.5 for _ in logs]
    return [PAD + (1 - 2 * PAD) * (x - lo) / (hi - lo) for x in logs]


def scaling_svg(sweep: dict, width: float = 1000.0) -> str:
    points = sweep["points"]
    axis = sweep["axis"]
    where = log2_positions([p["value"] for p in points])
    left, gap, top, panel_h = 56.0, 54.0, 62.0, 190.0
    panel_w = (width - left - 24 - gap * (len(PANELS) - 1)) / len(PANELS)
    table_top = top + panel_h + 52
    line_h = 15.0
    rows = [_degree_line(sweep, p) for p in points]
    wrapped = [wrap(r, int((width - 48) / 6.0), 2) for r in rows]
    height = table_top + 22 + sum(len(w) for w in wrapped) * line_h + 12
    title = f"Scaling: {sweep.get('model', '')} on {sweep.get('gpu', '')} over {AXIS_LABEL.get(axis, axis)}"
    svg = Svg(width, height, "scaling", title)
    svg.text(left - 32, 20, title, size=14, weight="600")
    fixed = sweep.get("fixed") or {}
    if fixed:
        svg.text(width - 24, 20, ", ".join(f"{k} {v}" for k, v in fixed.items()), size=11, anchor="end", fill=COLORS["muted"])
    for k, (key, label, color) in enumerate(PANELS):
        x0 = left + k * (panel_w + gap)
        vals = [(i, p[key] * (100 if key == "mfu" else 1)) for i, p in enumerate(points) if p.get("ok")]
        hi = max((v for _, v in vals), default=1.0) * 1.15 or 1.0
        base = top + panel_h
        svg.open(class_="panel", id=f"scaling-{key}", data_metric=key)
        svg.text(x0, top - 12, label, size=12, weight="600")
        for t in nice_ticks(hi, 4):
            if t > hi:
                break
            y = base - t / hi * panel_h
            svg.line(x0, y, x0 + panel_w, y, stroke=COLORS["grid"], width=0.7)
            svg.text(x0 - 6, y + 4, tick_label(round(t, 6)), size=9.5, anchor="end", fill=COLORS["muted"])
        svg.line(x0, base, x0 + panel_w, base, stroke=COLORS["muted"])

        def px(i: int, x0: float = x0) -> float:
            return x0 + where[i] * panel_w

        for i, p in enumerate(points):
            svg.text(px(i), base + 15, fmt_num(p["value"]), size=10, anchor="middle", fill=COLORS["muted"])
        if len(vals) > 1:
            d = " ".join(("M" if j == 0 else "L") + f"{px(i):.2f},{base - v / hi * panel_h:.2f}" for j, (i, v) in enumerate(vals))
            svg.path(d, color, width=2.0, class_="series")
        for i, v in vals:
            y = base - v / hi * panel_h
            svg.circle(px(i), y, 4.0, color, tooltip=f"{fmt_num(points[i]['value'])}: {fmt_num(v)}", class_="point",
                       data_value=points[i]["value"])
            svg.text(px(i), y - 8, fmt_num(v), size=9.5, anchor="middle", fill=COLORS["ink"], class_="value")
        for i, p in enumerate(points):
            if not p.get("ok"):
                svg.text(px(i), base - 6, "×", size=14, anchor="middle", fill=COLORS["accent"])
        svg.text(x0 + panel_w / 2, base + 32, f"{AXIS_LABEL.get(axis, axis)} (log2 scale)", size=10.5, anchor="middle", fill=COLORS["muted"])
        svg.close()
    svg.text(left - 32, table_top, "degrees chosen at each point", size=12, weight="600")
    y = table_top + 20
    svg.open(class_="degrees")
    for p, lines in zip(points, wrapped, strict=True):
        for j, line in enumerate(lines):
            svg.text(left - 32 + (0 if j == 0 else 16), y, line, size=10.5, fill=COLORS["ink"] if p.get("ok") else COLORS["accent"])
            y += line_h
    svg.close()
    return svg.to_string()


def _degree_line(sweep: dict, p: dict) -> str:
    head = f"{fmt_num(p['value'])} {AXIS_LABEL.get(sweep['axis'], '')}:"
    if not p.get("ok"):
        return f"{head} no plan: {p.get('error', '')}"
    par = p["parallelism"]
    return (f"{head} {degrees(par)} {knobs(par)}, {par.get('num_micro_batches', '?')} micro-batches; "
            f"step {fmt_num(p['step_time_s'])} s, {fmt_num(p['tokens_per_s'])} tokens/s, MFU {fmt_num(p['mfu'] * 100)}%, "
            f"{fmt_num(p['peak_gib'])} GiB")
