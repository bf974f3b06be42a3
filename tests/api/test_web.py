"""The web routes and POST /v1/sweeps on a live server (auth on)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import httpx
import pytest

from .conftest import SMALL, small_plan


@pytest.fixture(scope="module")
def stored(client) -> dict:
    r = client.post("/v1/plans", json=small_plan())
    assert r.status_code in (200, 201), r.text
    return r.json()


def test_index_is_the_form_with_local_assets(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    for ident in ("plan-form", "preset", "hf-config", "gpu", "num-gpus", "global-batch", "seq-len", "engine",
                  "dtype", "top-k", "time-limit", "pin-tp", "pin-pp", "pin-dp", "pin-cp", "pin-ep", "pin-vpp", "pin-mbs",
                  "pin-recompute", "pin-zero", "pin-schedule", "pin-dp-replicate", "pin-offload", "pin-act-offload"):
        assert f'id="{ident}"' in html
    for dtype in ("bf16", "fp16", "fp8", "fp32"):
        assert f'<option value="{dtype}"' in html
    assert "https://" not in html and "//cdn" not in html
    for name, kind in (("report.css", "text/css"), ("app.js", "text/javascript")):
        a = httpx.get(f"{server.url}/assets/{name}")
        assert a.status_code == 200 and a.headers["content-type"].startswith(kind) and len(a.text) > 500
    assert httpx.get(f"{server.url}/assets/other.js").status_code == 404


def test_report_page_and_pictures_of_a_stored_plan(client, stored):
    pid = stored["id"]
    page = client.get(f"/v1/plans/{pid}/report.html")
    assert page.status_code == 200 and page.text.startswith("<!doctype html>")
    assert page.text.count('class="plan-figure"') == 4 and pid in page.text
    frag = client.get(f"/v1/plans/{pid}/report.html", params={"fragment": 1})
    assert frag.text.startswith("<section")
    for name in ("timeline", "memory", "breakdown", "alternatives"):
        r = client.get(f"/v1/plans/{pid}/{name}.svg")
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
        assert ET.fromstring(r.text).get("id") == name
    assert client.get(f"/v1/plans/{pid}/other.svg").status_code == 404
    missing = client.get("/v1/plans/p_missing/report.html")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_report_needs_the_token(server, stored):
    assert httpx.get(f"{server.url}/v1/plans/{stored['id']}/report.html").status_code == 401


def test_sweep_over_gpu_counts(client):
    body = {**SMALL, "search": {"time_limit_s": 10}, "sweep": {"num_gpus": [8, 16]}}
    r = client.post("/v1/sweeps", json=body)
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["axis"] == "num_gpus" and [p["value"] for p in res["points"]] == [8, 16]
    for p in res["points"]:
        par = p["parallelism"]
        assert p["ok"] and par["dp"] * par["tp"] * par["pp"] * par["cp"] == p["value"]
    assert ET.fromstring(res["svg"]).get("id") == "scaling"
    assert res["table"].splitlines()[0].split()[:2] == ["GPUs", "dp"]


@pytest.mark.parametrize("sweep", [{}, {"num_gpus": [8], "global_batch_size": [8]}, {"num_gpus": []}, {"num_gpus": [0]}])
def test_sweep_rejects_bad_axes(client, sweep):
    r = client.post("/v1/sweeps", json={**SMALL, "sweep": sweep})
    assert r.status_code == 422, r.text
    assert "error" in r.json()
