"""Scaling: a sweep (planner/sweep.py) drawn as step time, tokens/s and MFU against the
swept GPU count or global batch, with the degrees the planner chose at each point. Points
without a feasible plan are marked on the axis and listed with the reason."""

from __future__ import annotations

from planner.report.common import degrees, knobs
from planner.report.svg import COLORS, Svg, nice_ticks, tick_label, wrap

PANELS = (
    ("step_time_s", "step time (s)", COLORS["forward"]),
    ("tokens_per_s", "tokens/s", COLORS["dp_sync"]),
    ("mfu", "MFU (%)", COLORS["backward"]),
)
AXIS_LABEL = {"num_gpus": "GPUs", "global_batch_size": "global batch (sequences)"}


def scaling_svg(sweep: dict, width: float = 1000.0) -> str:
    points = sweep["points"]
    axis = sweep["axis"]
    n = len(points)
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
            return x0 + (i + 0.5) * panel_w / max(1, n)

        for i, p in enumerate(points):
            svg.text(px(i), base + 15, tick_label(p["value"]), size=10, anchor="middle", fill=COLORS["muted"])
        if len(vals) > 1:
            d = " ".join(("M" if j == 0 else "L") + f"{px(i):.2f},{base - v / hi * panel_h:.2f}" for j, (i, v) in enumerate(vals))
            svg.path(d, color, width=2.0, class_="series")
        for i, v in vals:
            y = base - v / hi * panel_h
            svg.circle(px(i), y, 4.0, color, tooltip=f"{points[i]['value']}: {v:,.4g}", class_="point", data_value=points[i]["value"])
            svg.text(px(i), y - 8, f"{v:,.3g}" if key != "tokens_per_s" else tick_label(round(v, -2) if v > 1e4 else v), size=9.5,
                     anchor="middle", fill=COLORS["ink"])
        for i, p in enumerate(points):
            if not p.get("ok"):
                svg.text(px(i), base - 6, "×", size=14, anchor="middle", fill=COLORS["accent"])
        svg.text(x0 + panel_w / 2, base + 32, AXIS_LABEL.get(axis, axis), size=10.5, anchor="middle", fill=COLORS["muted"])
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
    head = f"{p['value']} {AXIS_LABEL.get(sweep['axis'], '')}:"
    if not p.get("ok"):
        return f"{head} no plan: {p.get('error', '')}"
    par = p["parallelism"]
    return (f"{head} {degrees(par)} {knobs(par)}, {par.get('num_micro_batches', '?')} micro-batches; "
            f"step {p['step_time_s']:.3g} s, MFU {p['mfu'] * 100:.1f}%, {p['peak_gib']:.1f} GiB")
