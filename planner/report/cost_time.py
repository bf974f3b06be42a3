"""Cost vs time to train: a sweep's points (planner/sweep.py) with economics, drawn as cost
(USD) against days to train, one marker shape and colour per GPU type, each marker labelled
with its GPU count; the Pareto front (planner/frontier.py) joined fastest to cheapest, the
chosen point ringed, and the deadline and budget drawn as dashed lines. Points that are not on
the chart (no plan, no price, skipped) are listed under it with their reason.

Both axes are linear from 0, so a point twice as costly sits twice as high; every number is
written with svg.fmt_num, the page's one number format."""

from __future__ import annotations

from html import escape

from planner.frontier import S_PER_DAY, time_and_cost
from planner.report.svg import COLORS, Svg, attrs, fmt_num, nice_ticks, tick_label, wrap

# one colour per GPU type, in the order the sweep lists them (Tableau 10 order, as COLORS)
SERIES_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2", "#9d755d", "#eeca3b")
MARKERS = ("circle", "square", "triangle", "diamond", "down", "hexagon")
R = 5.5  # marker half-size (px)


def marker_path(shape: str, x: float, y: float, r: float = R) -> str:
    """The outline of one marker shape centred at (x, y), as SVG path data."""
    if shape == "square":
        pts = [(x - r, y - r), (x + r, y - r), (x + r, y + r), (x - r, y + r)]
    elif shape == "triangle":
        pts = [(x, y - r * 1.2), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)]
    elif shape == "down":
        pts = [(x, y + r * 1.2), (x + r * 1.1, y - r * 0.8), (x - r * 1.1, y - r * 0.8)]
    elif shape == "diamond":
        pts = [(x, y - r * 1.3), (x + r * 1.3, y), (x, y + r * 1.3), (x - r * 1.3, y)]
    elif shape == "hexagon":
        pts = [(x - r, y), (x - r / 2, y - r), (x + r / 2, y - r), (x + r, y), (x + r / 2, y + r), (x - r / 2, y + r)]
    else:  # circle: a 4-arc path, so every marker is one <path>
        return (f"M{x - r:.2f},{y:.2f} a{r:.2f},{r:.2f} 0 1,0 {2 * r:.2f},0 "
                f"a{r:.2f},{r:.2f} 0 1,0 {-2 * r:.2f},0 Z")
    return "M" + " L".join(f"{px:.2f},{py:.2f}" for px, py in pts) + " Z"


def _gpus(sweep: dict) -> list[str]:
    """The GPU types in the sweep's order (its gpu axis, else the points')."""
    names = list((sweep.get("axes") or {}).get("gpu") or [])
    for p in sweep["points"]:
        g = p.get("gpu")
        if g and g not in names:
            names.append(g)
    return names or [sweep.get("gpu", "")]


def _label(p: dict) -> str:
    return f"{p.get('gpu', '')} x{p.get('num_gpus', p.get('value', ''))}".strip()


def cost_time_svg(sweep: dict, width: float = 1000.0) -> str:
    points = sweep["points"]
    gpus = _gpus(sweep)
    style = {g: (SERIES_COLORS[i % len(SERIES_COLORS)], MARKERS[i % len(MARKERS)]) for i, g in enumerate(gpus)}
    scored = [(i, tc) for i, p in enumerate(points) if (tc := time_and_cost(p)) is not None]
    front = [i for i in sweep.get("front") or [] if time_and_cost(points[i]) is not None]
    chosen = sweep.get("chosen")
    deadline_d, budget = sweep.get("deadline_days"), sweep.get("budget_usd")

    left, top, plot_w, plot_h = 84.0, 56.0, width - 84 - 220, 380.0
    base = top + plot_h
    x_hi = max([tc[0] / S_PER_DAY for _, tc in scored] + [deadline_d or 0.0]) * 1.1 or 1.0
    y_hi = max([tc[1] for _, tc in scored] + [budget or 0.0]) * 1.1 or 1.0
    off = [p for p in points if time_and_cost(p) is None]
    notes = [f"{_label(p)}: {_off_reason(p)}" for p in off]
    choice = sweep.get("choice") or ""
    wrapped = [wrap(n, int((width - 60) / 6.0), 2) for n in [choice, *notes] if n]
    line_h = 15.0
    height = base + 56 + sum(len(w) for w in wrapped) * line_h + 16

    title = f"Cost vs time to train: {sweep.get('model', '')}"
    tokens = (sweep.get("fixed") or {}).get("tokens")
    svg = Svg(width, height, "cost-time", title)
    svg.text(16, 22, title, size=14, weight="600")
    sub = ", ".join(x for x in (f"{fmt_num(tokens)} tokens" if tokens else "",
                                ", ".join(f"{k} {v}" for k, v in (sweep.get("fixed") or {}).items() if k != "tokens")) if x)
    svg.text(width - 16, 22, sub, size=11, anchor="end", fill=COLORS["muted"])

    def px(days: float) -> float:
        return left + days / x_hi * plot_w

    def py(usd: float) -> float:
        return base - usd / y_hi * plot_h

    svg.open(class_="axes")
    for t in nice_ticks(y_hi, 5):
        if t > y_hi:
            break
        svg.line(left, py(t), left + plot_w, py(t), stroke=COLORS["grid"], width=0.7)
        svg.text(left - 6, py(t) + 4, "$" + tick_label(t), size=9.5, anchor="end", fill=COLORS["muted"])
    for t in nice_ticks(x_hi, 6):
        if t > x_hi:
            break
        svg.line(px(t), base, px(t), base + 4, stroke=COLORS["muted"])
        svg.text(px(t), base + 16, tick_label(t), size=9.5, anchor="middle", fill=COLORS["muted"])
    svg.line(left, base, left + plot_w, base, stroke=COLORS["muted"])
    svg.line(left, top, left, base, stroke=COLORS["muted"])
    svg.text(left + plot_w / 2, base + 34, "time to train (days)", size=10.5, anchor="middle", fill=COLORS["muted"])
    svg.text(16, top - 12, "cost (USD)", size=10.5, fill=COLORS["muted"])
    svg.close()

    if deadline_d is not None:
        svg.line(px(deadline_d), top, px(deadline_d), base, stroke=COLORS["accent"], width=1.0,
                 stroke_dasharray="5,4", class_="deadline")
        svg.text(px(deadline_d) + 4, top + 10, f"deadline {fmt_num(deadline_d)} days", size=10, fill=COLORS["accent"])
    if budget is not None:
        svg.line(left, py(budget), left + plot_w, py(budget), stroke=COLORS["accent"], width=1.0,
                 stroke_dasharray="5,4", class_="budget")
        svg.text(left + plot_w - 4, py(budget) - 5, f"budget ${fmt_num(budget)}", size=10, anchor="end", fill=COLORS["accent"])

    if len(front) > 1:
        d = " ".join(("M" if j == 0 else "L") + f"{px(points[i]['economics']['time_to_train_s'] / S_PER_DAY):.2f},"
                     f"{py(points[i]['economics']['cost_usd']):.2f}" for j, i in enumerate(front))
        svg.path(d, COLORS["ink"], width=1.5, class_="front")
    svg.open(class_="points")
    for i, (t_s, usd) in scored:
        p = points[i]
        color, shape = style.get(p.get("gpu"), (COLORS["muted"], "circle"))
        x, y = px(t_s / S_PER_DAY), py(usd)
        tip = (f"{_label(p)}: {fmt_num(t_s / S_PER_DAY)} days, ${fmt_num(usd)}"
               + (" (on the front)" if p.get("on_front") else ""))
        a = attrs({"d": marker_path(shape, x, y), "fill": color, "fill_opacity": 1.0 if p.get("on_front") else 0.45,
                   "stroke": COLORS["ink"] if p.get("on_front") else color, "stroke_width": 1.0, "class_": "point",
                   "data_index": i, "data_gpu": p.get("gpu", ""), "data_num_gpus": p.get("num_gpus", ""),
                   "data_front": 1 if p.get("on_front") else 0})
        svg.add(f"<path {a}><title>{escape(tip)}</title></path>")
        svg.text(x + 8, y + 3, fmt_num(p.get("num_gpus", 0)), size=9, fill=COLORS["muted"], class_="count")
    svg.close()
    if chosen is not None and time_and_cost(points[chosen]) is not None:
        t_s, usd = time_and_cost(points[chosen])
        x, y = px(t_s / S_PER_DAY), py(usd)
        svg.circle(x, y, R + 5, "none", stroke=COLORS["accent"], stroke_width=2.0, class_="chosen",
                   data_index=chosen, tooltip=f"chosen: {_label(points[chosen])}")
        svg.text(x + 12, y - 10, f"chosen: {_label(points[chosen])}", size=10.5, weight="600", fill=COLORS["accent"])

    lx, ly = left + plot_w + 24, top + 4
    svg.open(class_="legend")
    for g in gpus:
        color, shape = style[g]
        svg.add(f"<path {attrs({'d': marker_path(shape, lx + 5, ly - 4), 'fill': color})}/>")
        svg.text(lx + 16, ly, g, size=11, fill=COLORS["ink"])
        ly += 18
    svg.line(lx, ly, lx + 12, ly, stroke=COLORS["ink"], width=1.5)
    svg.text(lx + 16, ly + 4, "Pareto front", size=11, fill=COLORS["muted"])
    ly += 18
    svg.circle(lx + 5, ly, 6, "none", stroke=COLORS["accent"], stroke_width=2.0)
    svg.text(lx + 16, ly + 4, "chosen", size=11, fill=COLORS["muted"])
    svg.close()

    y = base + 56
    svg.open(class_="notes")
    for k, lines in enumerate(wrapped):
        for j, line in enumerate(lines):
            svg.text(16 + (0 if j == 0 else 16), y, line, size=10.5,
                     fill=COLORS["ink"] if k == 0 and choice else COLORS["accent"])
            y += line_h
    svg.close()
    return svg.to_string()


def _off_reason(p: dict) -> str:
    """Why a point is not on the chart."""
    if not p.get("ok"):
        return f"no plan: {p.get('error', '')}"
    reasons = (p.get("economics") or {}).get("reasons") or []
    return "; ".join(reasons) or "no time to train or cost"
