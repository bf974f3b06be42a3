"""api.client.PlannerClient: typed results against a live server, PlannerError for error
bodies, retries on 429/503 that honour Retry-After."""

from __future__ import annotations

import time

import httpx
import pytest

from api.client import Estimate, PlannerClient, PlannerError
from planner.service import estimate as estimate_request

from .conftest import PARALLELISM, SMALL, TOKEN, small_plan


@pytest.fixture(scope="module")
def pc(server):
    with PlannerClient(server.url, token=TOKEN) as c:
        yield c


def test_estimate_typed(pc):
    est = pc.estimate({**SMALL, "parallelism": PARALLELISM})
    assert isinstance(est, Estimate) and est.fits and est.prediction["mfu"] > 0


def test_errors_raise_planner_error(pc, server):
    with pytest.raises(PlannerError) as e:
        pc.estimate({**SMALL, "model": {"name": "nope"}, "parallelism": PARALLELISM})
    assert e.value.status == 422 and e.value.code == "invalid_request"
    assert e.value.details["field"] == "model.name"
    with pytest.raises(PlannerError) as e:
        pc.get_plan("p_missing")
    assert e.value.status == 404
    with PlannerClient(server.url) as anon, pytest.raises(PlannerError) as e:
        anon.models()
    assert e.value.status == 401


def test_plan_get_list(pc):
    plan = pc.plan(small_plan(48))
    assert plan.id.startswith("p_") and pc.last_cache == "miss"
    pc.plan(small_plan(48))
    assert pc.last_cache == "hit"
    assert pc.get_plan(plan.id).parallelism == plan.parallelism
    assert plan.id in [it["id"] for it in pc.list_plans(limit=200).items]
    res = pc.check({**SMALL, "parallelism": PARALLELISM}, max_slowdown=10.0)
    assert res.fits


def test_retries_honour_retry_after():
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        if len(calls) < 3:
            return httpx.Response(429 if len(calls) == 1 else 503, headers={"Retry-After": "0.2"},
                                  json={"error": {"code": "queue_full", "message": "busy", "details": {}}})
        return httpx.Response(200, json=body)

    body = estimate_request({**SMALL, "parallelism": PARALLELISM}).to_dict()  # a real Estimate body

    with PlannerClient("http://planner.test", transport=httpx.MockTransport(handler)) as c:
        est = c.estimate({})
    assert est == Estimate.model_validate(body) and len(calls) == 3
    assert calls[1] - calls[0] >= 0.19 and calls[2] - calls[1] >= 0.19

    with PlannerClient("http://planner.test", retries=1, transport=httpx.MockTransport(
            lambda r: httpx.Response(429, headers={"Retry-After": "0"},
                                     json={"error": {"code": "queue_full", "message": "busy", "details": {}}}))) as c:
        with pytest.raises(PlannerError) as e:
            c.estimate({})
    assert e.value.code == "queue_full"
