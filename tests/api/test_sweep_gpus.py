"""POST /v1/sweeps over GPU types x counts on a live server (real uvicorn, real HTTP): the
points, the front and the chosen point (checked against planner.frontier on the answer's own
points, and the points against the library grid), the cost-vs-time SVG, per-GPU prices from
the request, and the refusals named by field."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import httpx
import pytest

from planner.frontier import choose, pareto_front
from planner.sweep import grid

TOKENS = 10**10
BODY = {
    "model": {"name": "llama3-8b"},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 8},
    "training": {"global_batch_size": 32, "seq_length": 2048, "total_tokens": TOKENS},
    "search": {"time_limit_s": 30},
}
AXES = {"gpu": ["a100-80gb", "h100-sxm", "b200"], "num_gpus": [8, 16]}


@pytest.fixture(scope="module")
def answer(client) -> dict:
    r = client.post("/v1/sweeps", json={**BODY, "sweep": {**AXES, "deadline_days": 2}})
    assert r.status_code == 200, r.text
    return r.json()


def test_grid_front_and_choice(answer):
    pts = answer["points"]
    assert [(p["gpu"], p["num_gpus"]) for p in pts] == [(g, n) for g in AXES["gpu"] for n in AXES["num_gpus"]]
    assert all(p["ok"] and p["economics"]["cost_usd"] > 0 for p in pts)
    assert answer["axes"] == AXES and answer["deadline_days"] == 2
    assert answer["front"] == pareto_front(pts)
    assert answer["chosen"] == choose(pts, 2)[0] and answer["chosen"] in answer["front"]
    assert answer["choice"] == choose(pts, 2)[1]
    root = ET.fromstring(answer["svg"])
    assert root.get("id") == "cost-time"
    assert len(root.findall(".//{http://www.w3.org/2000/svg}path[@class='point']")) == len(pts)
    assert "f: on the time/cost front" in answer["table"]


def test_rest_points_equal_the_library_grid(answer):
    lib = grid(BODY, AXES, time_limit_s=30, deadline_days=2)
    for a, b in zip(answer["points"], lib["points"], strict=True):
        assert a["parallelism"] == b["parallelism"] and a["step_time_s"] == b["step_time_s"]
        assert a["economics"] == b["economics"]
    assert answer["front"] == lib["front"] and answer["chosen"] == lib["chosen"]


def test_sweep_prices_override_the_table(client):
    body = {**BODY, "sweep": {"gpu": ["a100-80gb", "mi300x"], "num_gpus": [8], "prices": {"a100-80gb": 0.5, "mi300x": 0.75}}}
    r = client.post("/v1/sweeps", json=body)
    assert r.status_code == 200, r.text
    for p, usd in zip(r.json()["points"], (0.5, 0.75), strict=True):
        assert p["economics"]["usd_per_gpu_h"] == usd and p["economics"]["price_source"] == "request: sweep.prices"


@pytest.mark.parametrize("change,field", [
    ({"training": {"global_batch_size": 32, "seq_length": 2048}}, "training.total_tokens"),
    ({"cluster": {"gpu": "a100-80gb", "num_gpus": 8, "gpus_per_node": 8}}, "cluster.gpus_per_node"),
    ({"cluster": {"gpu": "a100-80gb", "num_gpus": 8, "price_per_gpu_hour": 2.0}}, "cluster.price_per_gpu_hour"),
])
def test_refusals_name_the_field(client, change, field):
    r = client.post("/v1/sweeps", json={**BODY, **change, "sweep": AXES})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"]["field"] == field


def test_unknown_gpu_and_bad_limits(client):
    r = client.post("/v1/sweeps", json={**BODY, "sweep": {"gpu": ["h100"], "num_gpus": [8]}})
    assert r.status_code == 422 and "h100-sxm" in r.text
    r = client.post("/v1/sweeps", json={**BODY, "sweep": {**AXES, "budget_usd": -1}})
    assert r.status_code == 422
    r = client.post("/v1/sweeps", json={**BODY, "sweep": {"gpu": ["b200"], "num_gpus": [8], "global_batch_size": [32]}})
    assert r.status_code == 422


def test_sweep_page_is_served(server):
    r = httpx.get(server.url + "/sweep")
    assert r.status_code == 200
    for ident in ("sweep-form", "sweep-counts", "sweep-tokens", "sweep-deadline", "sweep-budget", "sweep-result"):
        assert f'id="{ident}"' in r.text
    assert 'class="sweep-gpu" value="mi300x" checked' in r.text
