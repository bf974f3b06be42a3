"""POST /v1/sweeps has an overall deadline (PLANNER_SWEEP_TIME_LIMIT_S): each point's limit
is capped by what is left, the points it leaves no time for come back as skipped with the
reason, and every point solved is counted in planner_solve_duration_seconds{kind}."""

from __future__ import annotations

import httpx

from planner.sweep import point_limit_s, skipped_point

from .conftest import SMALL
from .test_dedupe import solves
from .test_queue import slow_plan


def test_deadline_skips_the_points_it_leaves_no_time_for(make_server):
    srv = make_server(PLANNER_SWEEP_TIME_LIMIT_S="2.2")
    # every point searches until its 2 s limit: the first takes the deadline, the rest are skipped
    body = {**slow_plan(0), "sweep": {"num_gpus": [1024, 2048, 4096]}}
    r = httpx.post(f"{srv.url}/v1/sweeps", json=body, timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["deadline_s"] == 2.2
    assert [p["value"] for p in out["points"]] == [1024, 2048, 4096]  # none silently dropped
    assert not out["points"][0].get("skipped")
    skipped = [p for p in out["points"] if p.get("skipped")]
    assert skipped and skipped[-1]["value"] == 4096
    assert all(p["ok"] is False and "2.2 s deadline" in p["error"] for p in skipped)
    assert "deadline" in out["table"]
    assert out["solve_time_s"] < 2.2 + 5  # the deadline plus at most the grace of the point in progress
    assert solves(srv.url, "sweep_point") == 3 - len(skipped)


def test_sweep_points_counted_as_solves(make_server):
    srv = make_server()
    body = {**SMALL, "search": {"time_limit_s": 10}, "sweep": {"num_gpus": [8, 16]}}
    r = httpx.post(f"{srv.url}/v1/sweeps", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert not any(p.get("skipped") for p in r.json()["points"])
    assert solves(srv.url, "sweep_point") == 2


def test_point_limit_and_skip_reason():
    assert point_limit_s(10, 3.5) == 3.5
    assert point_limit_s(2, 3.5) == 2
    assert point_limit_s(None, 3.5) == 3.5 and point_limit_s(4, None) == 4
    p = skipped_point(64, 120)
    assert p == {"value": 64, "ok": False, "skipped": True,
                 "error": "skipped: the sweep's 120 s deadline was reached before this point"}


def test_library_sweep_keeps_skipped_points():
    from planner.sweep import sweep

    out = sweep({**SMALL, "search": {"time_limit_s": 10}}, "num_gpus", [8, 16], deadline_s=0.1)
    assert [p.get("skipped") for p in out["points"]] == [True, True]  # under MIN_POINT_S from the start
    full = sweep({**SMALL, "search": {"time_limit_s": 10}}, "num_gpus", [8, 16], deadline_s=60)
    assert all(p["ok"] for p in full["points"])
