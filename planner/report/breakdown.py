"""Step-time breakdown: where the predicted step goes on the critical pipeline rank
(prediction.breakdown, whose terms add up to step_time_s): compute, recompute, bubble and
each kind of exposed communication, as one stacked bar and one bar per term."""

from __future__ import annotations

from planner.report.common import as_dict, fmt_time
from planner.report.svg import COLORS, Svg

TERMS = (
    ("compute_s", "compute", COLORS["compute"]),
    ("recompute_s", "recompute", COLORS["recompute"]),
    ("bubble_s", "pipeline bubble", COLORS["bubble"]),
    ("tp_comm_s", "TP comm", COLORS["tp_comm"]),
    ("cp_comm_s", "CP comm", COLORS["cp_comm"]),
    ("ep_comm_s", "EP comm", COLORS["ep_comm"]),
    ("pp_comm_s", "PP send/recv", COLORS["pp_comm"]),
    ("dp_comm_s", "DP / ZeRO comm", COLORS["dp_comm"]),
    ("optimizer_s", "optimizer", COLORS["optimizer"]),
)


def breakdown_svg(plan, width: float = 1000.0) -> str:
    plan = as_dict(plan)
    pred = plan["prediction"]
    bd = pred["breakdown"]
    step = pred["step_time_s"]
    total = sum(max(0.0, bd.get(k, 0.0)) for k, _, _ in TERMS) or 1.0
    left, label_w, right = 24.0, 150.0, 170.0
    row_h = 22.0
    top = 80.0
    height = top + len(TERMS) * row_h + 20
    svg = Svg(width, height, "breakdown", "Step-time breakdown")
    svg.text(left, 20, "Step-time breakdown (critical pipeline rank)", size=14, weight="600")
    svg.text(width - 24, 20, f"step {fmt_time(step)}", size=12, anchor="end", fill=COLORS["muted"])
    # one stacked bar
    bar_w = width - 2 * left
    x = left
    svg.open(class_="stack")
    for key, label, color in TERMS:
        v = max(0.0, bd.get(key, 0.0))
        if v <= 0:
            continue
        w = v / total * bar_w
        svg.rect(x, 36, w, 26, color, tooltip=f"{label}: {fmt_time(v)} ({v / total * 100:.1f}%)", class_=f"term {key}")
        if w > 60:
            svg.text(x + 6, 53, label, size=10, fill="#ffffff" if key not in ("bubble_s", "cp_comm_s") else COLORS["ink"])
        x += w
    svg.close()
    # one bar per term
    plot_w = width - left - label_w - right
    biggest = max(max(0.0, bd.get(k, 0.0)) for k, _, _ in TERMS) or 1.0
    for i, (key, label, color) in enumerate(TERMS):
        v = max(0.0, bd.get(key, 0.0))
        y = top + i * row_h
        svg.open(class_="term-row", data_term=key)
        svg.text(left + label_w - 8, y + 12, label, size=11, anchor="end")
        svg.rect(left + label_w, y + 2, plot_w, row_h - 6, "#f5f5f5")
        svg.rect(left + label_w, y + 2, v / biggest * plot_w, row_h - 6, color, tooltip=f"{label}: {fmt_time(v)}", class_=f"term {key}")
        svg.text(left + label_w + plot_w + 8, y + 12, f"{fmt_time(v)}  {v / total * 100:5.1f}%", size=11, fill=COLORS["muted"])
        svg.close()
    return svg.to_string()
