"""Peak memory per pipeline rank (a GPU; with virtual stages its model chunks share it):
weights, gradients, optimizer states, activations, transients and margins (allocator
fragmentation + memory reserved outside the allocator) stacked per rank, against the GPU's
capacity and the planner's headroom line.

Per-rank parts come from the plan's `schedule.ranks` (planner/schedule.py). A plan without
them shows the fullest rank's parts (prediction.memory) and the other ranks' totals."""

from __future__ import annotations

from planner.report.common import as_dict
from planner.report.svg import COLORS, Svg, nice_ticks, tick_label

PARTS = (
    ("weights_gib", "weights", COLORS["weights"]),
    ("grads_gib", "gradients", COLORS["grads"]),
    ("optimizer_gib", "optimizer", COLORS["optimizer_states"]),
    ("activations_gib", "activations", COLORS["activations"]),
    ("transients_gib", "transients", COLORS["transients"]),
    ("margins_gib", "margins", COLORS["margins"]),
)
MAX_BARS = 32


def _ranks(plan: dict) -> list[dict]:
    block = plan.get("schedule") or {}
    rows = [r for r in block.get("ranks", []) if "peak_gib" in r]
    if rows:
        return rows
    mem = plan["prediction"]["memory"]
    pp = plan["parallelism"].get("pp", 1)
    per_rank: dict[int, float] = {}
    for s in plan.get("stages", []):
        per_rank[s["index"] % pp] = s["memory_gib"]
    out = []
    for r in range(pp):
        total = per_rank.get(r, mem["peak_gib"])
        if abs(total - mem["peak_gib"]) < 1e-9:
            parts = {k: mem.get(k, 0.0) for k, _, _ in PARTS[:4]}
            parts["margins_gib"] = mem.get("other_gib", 0.0)
            out.append({"rank": r, "peak_gib": total, **parts})
        else:
            out.append({"rank": r, "peak_gib": total, "margins_gib": total})
    return out


def _title(plan: dict, bars: int) -> str:
    """What the bars are: pipeline ranks (GPUs), each holding its vpp model chunks, not stages."""
    par = plan["parallelism"]
    pp, vpp = par.get("pp", 1), par.get("vpp", 1)
    chunks = f", {vpp} model chunks (virtual stages) each" if vpp > 1 else ""
    shown = f"; the {bars} fullest and end ranks shown" if bars < pp else ""
    return f"Peak memory per pipeline rank (GiB per GPU): {pp} rank{'s' if pp > 1 else ''}{chunks}{shown}"


def memory_svg(plan, width: float = 1000.0) -> str:
    plan = as_dict(plan)
    ranks = _ranks(plan)
    block = plan.get("schedule") or {}
    cap = block.get("capacity_gib") or plan["prediction"]["memory"]["capacity_gib"]
    headroom = block.get("memory_headroom")
    if len(ranks) > MAX_BARS:  # keep the fullest ranks and the ends
        keep = {0, len(ranks) - 1} | {r["rank"] for r in sorted(ranks, key=lambda r: -r["peak_gib"])[: MAX_BARS - 2]}
        ranks = [r for r in ranks if r["rank"] in keep]
    left, right, top, bottom = 64.0, 150.0, 56.0, 48.0
    plot_h = 260.0
    height = top + plot_h + bottom
    plot_w = width - left - right
    hi = max(cap, max(r["peak_gib"] for r in ranks)) * 1.04
    ys = plot_h / hi
    svg = Svg(width, height, "memory", _title(plan, len(ranks)))
    svg.text(left, 20, _title(plan, len(ranks)), size=14, weight="600")
    svg.legend(left, 40, [(label, color) for _, label, color in PARTS])
    base = top + plot_h
    svg.open(class_="axis")
    for t in nice_ticks(hi, 5):
        if t > hi:
            break
        y = base - t * ys
        svg.line(left, y, left + plot_w, y, stroke=COLORS["grid"], width=0.7)
        svg.text(left - 8, y + 4, tick_label(t), size=10, anchor="end", fill=COLORS["muted"])
    svg.close()
    slot = plot_w / max(1, len(ranks))
    bar_w = min(64.0, slot * 0.62)
    for i, r in enumerate(ranks):
        x = left + i * slot + (slot - bar_w) / 2
        y = base
        svg.open(class_="stage-bar", id=f"mem-rank-{r['rank']}", data_rank=r["rank"])
        for key, label, color in PARTS:
            v = r.get(key, 0.0)
            if v <= 0:
                continue
            h = v * ys
            svg.rect(x, y - h, bar_w, h, color, tooltip=f"rank {r['rank']} {label}: {v:.2f} GiB", class_=f"part {label}")
            y -= h
        svg.text(x + bar_w / 2, y - 5, f"{r['peak_gib']:.1f}", size=10, anchor="middle", fill=COLORS["ink"])
        svg.text(x + bar_w / 2, base + 16, f"rank {r['rank']}", size=10, anchor="middle", fill=COLORS["muted"])
        svg.close()
    cy = base - cap * ys
    svg.line(left, cy, left + plot_w, cy, stroke=COLORS["accent"], width=1.5, class_="capacity")
    svg.text(left + plot_w + 6, cy + 4, f"capacity {cap:.1f} GiB", size=10, fill=COLORS["accent"])
    if headroom:
        hy = base - cap * (1 - headroom) * ys
        svg.line(left, hy, left + plot_w, hy, stroke=COLORS["accent"], width=1.0, stroke_dasharray="5,4", class_="headroom")
        svg.text(left + plot_w + 6, hy + 14, f"headroom {headroom * 100:g}%: {cap * (1 - headroom):.1f}", size=10, fill=COLORS["accent"])
    svg.line(left, base, left + plot_w, base, stroke=COLORS["muted"])
    svg.text(left + plot_w / 2, height - 10, "pipeline rank (one GPU; its virtual stages share its memory)" if plan["parallelism"].get("vpp", 1) > 1 else "pipeline rank (one GPU)", size=11, anchor="middle", fill=COLORS["muted"])
    return svg.to_string()
