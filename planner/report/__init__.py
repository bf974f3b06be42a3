"""Pictures of a plan (SVG) and the HTML report around them.

`render_svgs(plan)` -> {name: svg}; `write_report(plan, directory)` writes report.html and
one SVG per picture (what `planner plan --emit DIR` puts beside plan.json). A plan is the
JSON shape of DESIGN.md: a dict, or an object with `model_dump` (a pydantic Plan).
docs/report.md describes each picture."""

from __future__ import annotations

from pathlib import Path

from planner.report.common import as_dict
from planner.report.cost_time import cost_time_svg
from planner.report.page import report_html
from planner.report.pictures import PICTURES, render_svgs
from planner.report.scaling import scaling_svg

__all__ = ["PICTURES", "cost_time_svg", "render_svgs", "report_html", "scaling_svg", "write_report"]


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
