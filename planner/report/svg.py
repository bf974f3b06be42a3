"""A small SVG writer: the handful of elements the plan pictures use (rect, line, text,
path, group), escaped, with stable ids and classes so tests can count elements and a
browser can style or inspect them. docs/report.md says why the pictures are written by
hand instead of through a plotting library."""

from __future__ import annotations

import math
from html import escape

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif"

# one colour per phase / memory part / time term (Tableau 10, colour-blind friendly order)
COLORS = {
    "forward": "#4c78a8",
    "backward": "#f58518",
    "wgrad": "#eeca3b",  # the weight-gradient part the zero-bubble schedules run apart
    "recompute": "#b279a2",
    "send": "#72b7b2",
    "recv": "#9ecae9",
    "dp_sync": "#54a24b",
    "optimizer": "#e45756",
    "idle": "#eeeeee",
    "weights": "#4c78a8",
    "grads": "#72b7b2",
    "optimizer_states": "#e45756",
    "activations": "#f58518",
    "transients": "#b279a2",
    "margins": "#bab0ac",
    "compute": "#4c78a8",
    "bubble": "#d3d3d3",
    "tp_comm": "#54a24b",
    "cp_comm": "#eeca3b",
    "ep_comm": "#ff9da6",
    "pp_comm": "#72b7b2",
    "dp_comm": "#9d755d",
    "ink": "#222222",
    "muted": "#666666",
    "grid": "#e3e3e3",
    "accent": "#c0392b",
}


def fmt(x: float) -> str:
    """Coordinates with at most 2 decimals (small files, stable output)."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def attrs(d: dict) -> str:
    out = []
    for k, v in d.items():
        if v is None or v is False:
            continue
        key = k.rstrip("_").replace("_", "-")
        out.append(f'{key}="{escape(fmt(v) if isinstance(v, float) else str(v), quote=True)}"')
    return " ".join(out)


class Svg:
    def __init__(self, width: float, height: float, gid: str, title: str):
        self.width, self.height, self.gid, self.title = width, height, gid, title
        self.parts: list[str] = []
        self.defs: list[str] = []

    def add(self, raw: str) -> None:
        self.parts.append(raw)

    def rect(self, x, y, w, h, fill, tooltip: str | None = None, **kw) -> None:
        a = attrs({"x": float(x), "y": float(y), "width": float(max(0.0, w)), "height": float(max(0.0, h)), "fill": fill, **kw})
        if tooltip:
            self.parts.append(f"<rect {a}><title>{escape(tooltip)}</title></rect>")
        else:
            self.parts.append(f"<rect {a}/>")

    def line(self, x1, y1, x2, y2, stroke=COLORS["grid"], width=1.0, **kw) -> None:
        self.parts.append(f"<line {attrs({'x1': float(x1), 'y1': float(y1), 'x2': float(x2), 'y2': float(y2), 'stroke': stroke, 'stroke_width': float(width), **kw})}/>")

    def text(self, x, y, s: str, size=11, anchor="start", fill=COLORS["ink"], weight=None, **kw) -> None:
        a = attrs({"x": float(x), "y": float(y), "font_size": size, "text_anchor": anchor, "fill": fill, "font_weight": weight, **kw})
        self.parts.append(f"<text {a}>{escape(s)}</text>")

    def path(self, d: str, stroke, width=2.0, fill="none", **kw) -> None:
        self.parts.append(f"<path {attrs({'d': d, 'stroke': stroke, 'stroke_width': float(width), 'fill': fill, **kw})}/>")

    def circle(self, cx, cy, r, fill, tooltip: str | None = None, **kw) -> None:
        a = attrs({"cx": float(cx), "cy": float(cy), "r": float(r), "fill": fill, **kw})
        self.parts.append(f"<circle {a}><title>{escape(tooltip)}</title></circle>" if tooltip else f"<circle {a}/>")

    def open(self, **kw) -> None:
        self.parts.append(f"<g {attrs(kw)}>")

    def close(self) -> None:
        self.parts.append("</g>")

    def legend(self, x: float, y: float, items: list[tuple[str, str]], gap: float = 18) -> float:
        """Swatches in one row; returns the x after the last."""
        self.open(class_="legend")
        for label, color in items:
            self.rect(x, y - 9, 10, 10, color, rx=2)
            self.text(x + 14, y, label, size=11, fill=COLORS["muted"])
            x += 14 + 6.5 * len(label) + gap
        self.close()
        return x

    def to_string(self) -> str:
        w, h = fmt(float(self.width)), fmt(float(self.height))
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(self.gid)}" class="plan-figure" '
            f'viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            f'font-family="{escape(FONT, quote=True)}"><title>{escape(self.title)}</title>'
        )
        defs = f"<defs>{''.join(self.defs)}</defs>" if self.defs else ""
        bg = f'<rect class="background" x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>'
        return head + defs + bg + "".join(self.parts) + "</svg>\n"


def nice_ticks(hi: float, n: int = 6) -> list[float]:
    """Round tick values from 0 to at least `hi` (1, 2, 2.5, 5 x 10^k steps)."""
    if hi <= 0 or not math.isfinite(hi):
        return [0.0, 1.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(k * mag for k in (1, 2, 2.5, 5, 10) if k * mag >= raw)
    count = int(math.ceil(hi / step - 1e-9))
    return [i * step for i in range(count + 1)]


def fmt_num(v: float, digits: int = 3) -> str:
    """The one number format of the pictures and the page: `digits` significant digits below
    1000 (49.7, 0.121, 371) and a k / M / G / T suffix from 1000 up (2.5k, 371k, 1.3M), so
    neighbouring labels read alike."""
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    if abs(float(f"{v:.{digits}g}")) < 1000:
        return f"{float(f'{v:.{digits}g}'):g}"
    for div, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        scaled = float(f"{v / div:.{digits}g}")  # rounded first: 999.9k reads 1M, not 1e+03k
        if abs(scaled) < 1000 or suffix == "T":
            return f"{scaled:g}{suffix}"
    return f"{v:.{digits}g}"


def tick_label(v: float) -> str:
    """An axis tick (a round value from nice_ticks), in fmt_num's format."""
    return fmt_num(v, digits=4)


def wrap(text: str, width_chars: int, max_lines: int = 3) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if len(cur) + len(w) + 1 > width_chars and cur:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    if cur:
        lines.append(cur)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: max(0, width_chars - 1)].rstrip() + "…"
    return lines
