"""What a plan answer carries for people and clients, on a live server (auth on): `links` to
every route that serves the stored plan (each answers 200), the compact form, one id
format, and an honest `timed_out`."""

from __future__ import annotations

import pytest

from planner.ids import PLAN_ID_RE
from planner.plan import Plan

from .conftest import small_plan


@pytest.fixture(scope="module")
def created(client):
    r = client.post("/v1/plans", json=small_plan(batch=40))  # a batch no other test asks for
    assert r.status_code in (200, 201), r.text
    return r.json()


def test_links_name_routes_that_answer(client, created):
    links = created["links"]
    pid = created["id"]
    assert links["plan"] == f"/v1/plans/{pid}"
    assert set(links["pictures"]) == {"timeline", "breakdown", "memory", "alternatives"}
    urls = [links["plan"], links["compact"], links["report"], *links["pictures"].values()]
    for url in urls:
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code, r.text[:200])
    assert client.get(links["report"]).headers["content-type"].startswith("text/html")
    assert client.get(links["pictures"]["timeline"]).headers["content-type"].startswith("image/svg+xml")
    # GET of the stored plan: the same document, links included
    assert client.get(links["plan"]).json() == created


def test_compact_form_leaves_out_the_bulky_parts(client, created):
    full = created
    small = client.get(created["links"]["compact"]).json()
    assert not set(Plan.BULKY) & set(small)
    assert full["launch"] and full["stages"]  # the full form has them
    assert {k: v for k, v in full.items() if k not in Plan.BULKY} == small
    again = client.post("/v1/plans", params={"compact": "true"}, json=small_plan(batch=40))
    assert again.status_code == 200 and again.json() == small  # the cached answer, compact
    assert len(again.content) < len(client.get(created["links"]["plan"]).content) / 2


def test_one_plan_id_format(client, created):
    assert PLAN_ID_RE.fullmatch(created["id"]), created["id"]


def test_timed_out_when_the_search_cannot_finish_in_the_limit(client):
    # DeepSeek-V3 on 1024 H100: far more search than 0.2 s allows
    req = {"model": {"name": "deepseek-v3"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 1024},
           "training": {"global_batch_size": 4096, "seq_length": 4096, "dtype": "fp8"},
           "search": {"time_limit_s": 0.2}}
    r = client.post("/v1/plans", params={"refresh": "true"}, json=req)
    assert r.status_code == 201, r.text
    s = r.json()["search"]
    assert s["timed_out"] is True
    assert s["time_limit_s"] == 0.2 and s["solve_time_s"] > 0
    assert r.json()["status"] == "feasible"
