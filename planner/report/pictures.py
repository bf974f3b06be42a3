"""The plan's pictures by name: the SVGs report.html shows and the REST routes serve."""

from __future__ import annotations

from planner.report.alternatives import alternatives_svg
from planner.report.breakdown import breakdown_svg
from planner.report.common import as_dict
from planner.report.memory import memory_svg
from planner.report.timeline import timeline_svg

PICTURES = {
    "timeline": timeline_svg,
    "breakdown": breakdown_svg,
    "memory": memory_svg,
    "alternatives": alternatives_svg,
}


def render_svgs(plan) -> dict[str, str]:
    plan = as_dict(plan)
    return {name: draw(plan) for name, draw in PICTURES.items()}
