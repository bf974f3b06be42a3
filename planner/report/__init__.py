"""Pictures of a plan (SVG) and the HTML report around them.

`render_svgs(plan)` -> {name: svg}; `write_report(plan, directory)` writes report.html and
one SVG per picture (what `planner plan --emit DIR` puts beside plan.json). A plan is the
JSON shape of DESIGN.md: a dict, or an object with `model_dump` (a pydantic Plan).
docs/report.md describes each picture."""

from __future__ import annotations

from pathlib import Path

from .alternatives import alternatives_svg
from .breakdown import breakdown_svg
from .common import as_dict
from .memory import memory_svg
from .page import report_html
from .scaling import scaling_svg
from .timeline import timeline_svg

PICTURES = {
    "timeline": timeline_svg,
    "breakdown": breakdown_svg,
    "memory": memory_svg,
    "alternatives": alternatives_svg,
}

__all__ = ["PICTURES", "render_svgs", "report_html", "scaling_svg", "write_report"]


def render_svgs(plan) -> dict[str, str]:
    plan = as_dict(plan)
    return {name: draw(plan) for name, draw in PICTURES.items()}


def write_report(plan, directory) -> list[Path]:
    """report.html (self-contained: CSS, JS and SVGs inline) and <picture>.svg files."""
    plan = as_dict(plan)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    svgs = render_svgs(plan)
    paths = []
    for name, svg in svgs.items():
        p = out / f"{name}.svg"
        p.write_text(svg)
        paths.append(p)
    p = out / "report.html"
    p.write_text(report_html(plan, svgs, inline_assets=True))
    paths.append(p)
    return paths
