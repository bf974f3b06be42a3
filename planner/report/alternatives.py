"""Alternatives: the chosen plan and the top-k runners-up side by side — step time, MFU,
peak memory against capacity — with the reason each one loses (plan.alternatives[].reason,
planner/reasons.py)."""

from __future__ import annotations

from planner.report.common import as_dict, degrees, fmt_time, knobs
from planner.report.svg import COLORS, Svg, wrap

COLS = (("step time", 150.0), ("MFU", 120.0), ("peak memory", 150.0))


def alternatives_svg(plan, width: float = 1000.0) -> str:
    plan = as_dict(plan)
    rows = [{"parallelism": plan["parallelism"], "prediction": plan["prediction"], "reason": "chosen: the fastest plan that fits"}]
    rows += list(plan.get("alternatives") or [])
    left, cfg_w, gap = 24.0, 200.0, 16.0
    reason_x = left + cfg_w + sum(w + gap for _, w in COLS)
    reason_chars = max(20, int((width - reason_x - 16) / 6.2))
    row_h = 52.0
    top = 58.0
    height = top + len(rows) * row_h + (26 if len(rows) == 1 else 10)
    svg = Svg(width, height, "alternatives", "Alternatives: the chosen plan and the runners-up")
    svg.text(left, 20, "Alternatives: the chosen plan and the runners-up", size=14, weight="600")
    x = left + cfg_w
    for name, w in COLS:
        svg.text(x, 46, name, size=11, fill=COLORS["muted"], weight="600")
        x += w + gap
    svg.text(reason_x, 46, "why it loses", size=11, fill=COLORS["muted"], weight="600")
    slowest = max(r["prediction"]["step_time_s"] for r in rows) or 1.0
    best_t = rows[0]["prediction"]["step_time_s"]
    for i, r in enumerate(rows):
        par, pred = r["parallelism"], r["prediction"]
        mem = pred["memory"]
        y = top + i * row_h
        svg.open(class_="alternative" + (" chosen" if i == 0 else ""), id=f"alt-{i}", data_rank=i)
        if i == 0:
            svg.rect(left - 8, y - 4, width - 2 * left + 16, row_h - 6, "#f2f7fc", rx=4)
        svg.text(left, y + 14, ("★ " if i == 0 else f"#{i + 1} ") + degrees(par), size=12, weight="600")
        svg.text(left, y + 30, knobs(par), size=10, fill=COLORS["muted"])
        x = left + cfg_w
        bar = COLS[0][1] - 60
        t = pred["step_time_s"]
        svg.rect(x, y + 4, bar, 12, "#f0f0f0")
        svg.rect(x, y + 4, t / slowest * bar, 12, COLORS["forward"] if i == 0 else "#9fb7d3", tooltip=f"step {fmt_time(t)}", class_="bar step")
        slower = "" if i == 0 else f" (+{(t / best_t - 1) * 100:.1f}%)"
        svg.text(x + bar + 6, y + 14, fmt_time(t), size=10)
        svg.text(x, y + 30, slower.strip(), size=10, fill=COLORS["accent"] if i else COLORS["muted"])
        x += COLS[0][1] + gap
        bar = COLS[1][1] - 44
        svg.rect(x, y + 4, bar, 12, "#f0f0f0")
        svg.rect(x, y + 4, min(1.0, pred["mfu"]) * bar, 12, COLORS["dp_sync"], tooltip=f"MFU {pred['mfu'] * 100:.1f}%", class_="bar mfu")
        svg.text(x + bar + 6, y + 14, f"{pred['mfu'] * 100:.1f}%", size=10)
        x += COLS[1][1] + gap
        bar = COLS[2][1] - 70
        cap = mem["capacity_gib"] or 1.0
        frac = mem["peak_gib"] / cap
        svg.rect(x, y + 4, bar, 12, "#f0f0f0")
        svg.rect(x, y + 4, min(1.0, frac) * bar, 12, COLORS["activations"] if frac <= 1 else COLORS["accent"],
                 tooltip=f"peak {mem['peak_gib']:.1f} of {cap:.1f} GiB", class_="bar memory")
        svg.text(x + bar + 6, y + 14, f"{mem['peak_gib']:.1f}/{cap:.0f} GiB", size=10)
        for k, line in enumerate(wrap(str(r.get("reason", "")), reason_chars, 3)):
            svg.text(reason_x, y + 14 + 13 * k, line, size=10.5, fill=COLORS["ink"] if i else COLORS["muted"])
        svg.close()
    if len(rows) == 1:
        svg.text(left, top + row_h + 6, "no runner-up was kept: every other configuration was pruned by memory or by the time bound",
                 size=11, fill=COLORS["muted"])
    return svg.to_string()
