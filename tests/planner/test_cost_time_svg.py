"""The cost-vs-time picture (planner/report/cost_time.py): one marker per priced point, one
style per GPU type, the front drawn through the front's points in order, the chosen point
ringed, the deadline and budget drawn, and every point off the chart listed with its reason."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from planner.frontier import S_PER_DAY, choose, pareto_front
from planner.report.cost_time import cost_time_svg

NS = {"s": "http://www.w3.org/2000/svg"}


def _p(gpu, n, days, usd):
    return {"gpu": gpu, "num_gpus": n, "ok": True,
            "economics": {"time_to_train_s": days * S_PER_DAY, "cost_usd": usd, "reasons": []}}


def _sweep(deadline_days=None, budget_usd=None):
    points = [_p("h100-sxm", 8, 10, 5000.0), _p("h100-sxm", 16, 6, 6000.0), _p("b200", 8, 5, 4000.0),
              _p("b200", 16, 3, 4500.0), _p("h200", 8, 9, 7000.0),
              {"gpu": "mi300x", "num_gpus": 8, "ok": True, "economics": {
                  "time_to_train_s": 7 * S_PER_DAY, "cost_usd": None, "reasons": ["no price for GPU 'mi300x'"]}},
              {"gpu": "mi300x", "num_gpus": 16, "ok": False, "error": "no configuration fits"}]
    front = pareto_front(points)
    chosen, why = choose(points, deadline_days, budget_usd)
    for i, p in enumerate(points):
        p["on_front"], p["chosen"] = i in front, i == chosen
    return {"axes": {"gpu": ["h100-sxm", "b200", "h200", "mi300x"], "num_gpus": [8, 16]}, "model": "m",
            "fixed": {"tokens": 10**10}, "points": points, "front": front, "chosen": chosen, "choice": why,
            "deadline_days": deadline_days, "budget_usd": budget_usd}


def _numbers(d: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+),(-?[\d.]+)", d)]


def test_markers_front_and_choice():
    sweep = _sweep(deadline_days=4)
    root = ET.fromstring(cost_time_svg(sweep))
    assert root.get("id") == "cost-time"
    markers = root.findall(".//s:path[@class='point']", NS)
    assert sorted(int(m.get("data-index")) for m in markers) == [0, 1, 2, 3, 4]  # the priced points, once each
    fills = {m.get("data-gpu"): set() for m in markers}
    for m in markers:
        fills[m.get("data-gpu")].add(m.get("fill"))
    assert all(len(f) == 1 for f in fills.values()) and len({next(iter(f)) for f in fills.values()}) == 3
    assert {int(m.get("data-index")) for m in markers if m.get("data-front") == "1"} == set(sweep["front"]) == {2, 3}
    (front,) = root.findall(".//s:path[@class='front']", NS)
    xs = [x for x, _ in _numbers(front.get("d"))]
    assert len(xs) == len(sweep["front"]) and xs == sorted(xs)  # fastest (leftmost) first
    (ring,) = root.findall(".//s:circle[@class='chosen']", NS)
    assert int(ring.get("data-index")) == sweep["chosen"] == 3  # the cheapest within 4 days
    assert root.findall(".//s:line[@class='deadline']", NS) and not root.findall(".//s:line[@class='budget']", NS)
    text = "".join(root.itertext())
    assert "mi300x x8: no price for GPU 'mi300x'" in text and "mi300x x16: no plan: no configuration fits" in text
    assert sweep["choice"] in text


def test_positions_follow_time_and_cost():
    sweep = _sweep(budget_usd=4600)
    root = ET.fromstring(cost_time_svg(sweep))
    # the circle marker (the first GPU type's) starts at its left edge: M x-r,y
    circles = {int(m.get("data-index")): _numbers(m.get("d"))[0] for m in root.findall(".//s:path[@class='point']", NS)
               if m.get("data-gpu") == "h100-sxm"}
    (x0, y0), (x1, y1) = circles[0], circles[1]
    assert x1 < x0 and y1 < y0  # 16 GPUs: faster (left) and dearer (higher: smaller y)
    # linear axes from 0: the x distance is proportional to the days
    (x_chosen,) = [float(c.get("cx")) for c in root.findall(".//s:circle[@class='chosen']", NS)]
    assert sweep["chosen"] == 3 and root.findall(".//s:line[@class='budget']", NS)
    left = 84.0  # the plot's left edge (cost_time_svg's layout)
    assert (x0 + 5.5 - left) / (x_chosen - left) == pytest.approx(10 / 3, rel=1e-3)


def test_no_priced_point_still_draws():
    sweep = _sweep()
    for p in sweep["points"]:
        if p.get("ok"):
            p["economics"]["cost_usd"] = None
    sweep["front"], sweep["chosen"] = [], None
    root = ET.fromstring(cost_time_svg(sweep))
    assert not root.findall(".//s:path[@class='point']", NS)
