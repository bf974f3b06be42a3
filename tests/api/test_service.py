"""REST contract against a live uvicorn process (SQLite, auth on)."""

from __future__ import annotations

import httpx
import pytest

from .conftest import PARALLELISM, SMALL, small_plan


def test_healthz_open_and_v1_needs_token(server):
    assert httpx.get(f"{server.url}/healthz").json()["status"] == "ok"
    r = httpx.get(f"{server.url}/v1/models")
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_catalog(client):
    models = client.get("/v1/models").json()
    assert "llama3-8b" in {m["name"] for m in models}
    gpus = {g["name"] for g in client.get("/v1/gpus").json()}
    assert {"a100-80gb", "h100-sxm", "cpu"} <= gpus
    systems = {s["name"]: s for s in client.get("/v1/systems").json()}
    assert systems["dgx-h100"]["network"] == "8 x 400 Gb/s" and systems["dgx-h100"]["source"]
    assert {s["gpu"] for s in systems.values()} <= gpus


def test_estimate(client):
    r = client.post("/v1/estimate", json={**SMALL, "parallelism": PARALLELISM})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["fits"] is True
    assert d["prediction"]["step_time_s"] > 0
    assert d["stages"][0]["layers"] == [0, 31]


@pytest.mark.parametrize(
    "patch, field",
    [
        ({"cluster": {"gpu": "a100-80gb", "num_gpus": 0}}, "cluster.num_gpus"),  # pydantic bound
        ({"training": {"seq_length": 2048}}, "training.global_batch_size"),  # missing
        ({"model": {"name": "no-such-model"}}, "model.name"),  # SpecError from cost_model
        ({"parallelism": {"tp": 3, "dp": 4}}, None),  # SpecError: degrees don't multiply to 8
    ],
)
def test_invalid_input_is_422_with_field(client, patch, field):
    r = client.post("/v1/estimate", json={**SMALL, "parallelism": PARALLELISM, **patch})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_request"
    assert err["details"]["field"]
    if field:
        assert err["details"]["field"] == field
        assert field in err["message"]


def test_invalid_request_lists_every_error_with_the_key_meant(client):
    """A misspelt key and the field it leaves missing: both in the message and in
    details.errors (none hidden behind "and 1 more"), the misspelt key first with the key meant."""
    r = client.post("/v1/plans", json={**small_plan(), "training": {"global_batch": 32, "seq_length": 2048}})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_request"
    unknown, missing = err["details"]["errors"]
    assert unknown["field"] == "training.global_batch" and unknown["suggestion"] == "global_batch_size"
    assert unknown["message"] == "unknown field 'global_batch'" and "global_batch_size" in unknown["allowed"]
    assert (missing["field"], missing["message"]) == ("training.global_batch_size", "is required")
    assert err["details"]["field"] == "training.global_batch" and err["details"]["suggestion"] == "global_batch_size"
    assert err["message"].startswith("training.global_batch: unknown field 'global_batch'; did you mean "
                                     "'global_batch_size'? (allowed: [")
    assert err["message"].endswith("; training.global_batch_size: is required")
    assert "more)" not in err["message"]


@pytest.mark.parametrize("patch,field,meant", [
    ({"model": {"name": "llama-3-8b"}}, "model.name", "llama3-8b"),
    ({"cluster": {"gpu": "h100", "num_gpus": 8}}, "cluster.gpu", "h100-sxm"),
])
def test_unknown_names_suggest_the_catalog_name(client, patch, field, meant):
    r = client.post("/v1/plans", json={**small_plan(), **patch})
    assert r.status_code == 422, r.text
    d = r.json()["error"]["details"]
    assert (d["field"], d["suggestion"]) == (field, meant)
    assert d["errors"] == [{k: d[k] for k in ("field", "message", "allowed", "suggestion")}]
    assert f"; did you mean {meant!r}?" in r.json()["error"]["message"]


def test_malformed_and_oversized_bodies(client):
    r = client.post("/v1/estimate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code in (400, 422) and "error" in r.json()
    r = client.post("/v1/estimate", content=b"[" + b"1," * 600_000 + b"1]", headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"


def test_unknown_ids_404(client):
    for path in ("/v1/plans/p_nope", "/v1/profiles/prof_nope"):
        r = client.get(path)
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "not_found"


def test_profiles_roundtrip(client):
    prof = {"schema_version": 1, "device": "a100-80gb", "source": "test",
            "layers": [{"kind": "block", "tp": 2, "micro_batch_size": 1, "seq_length": 2048,
                        "fwd_s": 0.004, "bwd_s": 0.008, "activation_bytes": 3.0e8}], "comm": [], "gemm": []}
    r = client.post("/v1/profiles", json=prof)
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    assert r.headers["location"] == f"/v1/profiles/{pid}"
    got = client.get(f"/v1/profiles/{pid}").json()
    assert got["layers"] == prof["layers"] and got["id"] == pid
    # the stored profile calibrates an estimate
    r = client.post("/v1/estimate", json={**SMALL, "cluster": {**SMALL["cluster"], "profile_id": pid},
                                          "parallelism": PARALLELISM})
    assert r.status_code == 200, r.text
    r = client.post("/v1/estimate", json={**SMALL, "cluster": {**SMALL["cluster"], "profile_id": "prof_missing"},
                                          "parallelism": PARALLELISM})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "cluster.profile_id"
    bad = client.post("/v1/profiles", json={**prof, "layers": [{"kind": "nope"}]})
    assert bad.status_code == 422 and bad.json()["error"]["details"]["field"].startswith("profile.layers")


def test_list_plans_paginates_newest_first(server, client):
    # rows written straight into the server's database: paging does not depend on solving
    from api.settings import Settings
    from api.store import Store, make_engine

    store = Store(make_engine(Settings(data_dir=server.cwd).sqlalchemy_url()))
    for i in range(5):
        store.put_plan(f"p_page{i}", f"h{i}", "optimal", "{}", created_us=1_000_000 + i)
    ids, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        d = client.get("/v1/plans", params=params).json()
        ids += [it["id"] for it in d["items"] if it["id"].startswith("p_page")]
        cursor = d["next_cursor"]
        if not cursor:
            break
    assert ids == [f"p_page{i}" for i in range(4, -1, -1)]
    d = client.get("/v1/plans", params={"page": 1, "page_size": 100}).json()
    assert d["total"] >= 5
    created = [it["created_at"] for it in d["items"]]
    assert created == sorted(created, reverse=True)
    assert client.get("/v1/plans", params={"cursor": "garbage!"}).status_code == 422


def test_metrics(server, client):
    client.get("/v1/models")
    text = httpx.get(f"{server.url}/metrics").text
    assert 'planner_http_requests_total{method="GET",route="/v1/models",status="200"}' in text
    for name in ("planner_http_request_duration_seconds_bucket", "planner_solver_queue_depth",
                 "planner_plan_cache_hits_total", "planner_solve_duration_seconds"):
        assert name in text


def test_openapi_has_examples(client):
    spec = client.get("/openapi.json").json()
    for path in ("/v1/plans", "/v1/estimate", "/v1/check", "/v1/profiles"):
        assert path in spec["paths"]
    assert spec["components"]["schemas"]["EstimateRequest"]["examples"]


def test_plan_create_get_cache_refresh(client):
    req = {**small_plan(batch=24), "metadata": {"run": "a"}}  # a batch no other test asks for
    r = client.post("/v1/plans", json=req)
    assert r.status_code == 201, r.text
    plan = r.json()
    assert r.headers["location"] == f"/v1/plans/{plan['id']}"
    assert plan["id"].startswith("p_") and len(plan["request_hash"]) == 64
    assert plan["status"] in ("optimal", "feasible")
    for key in ("parallelism", "stages", "prediction", "launch", "reasons"):
        assert key in plan
    assert client.get(f"/v1/plans/{plan['id']}").json() == plan
    # identical request (metadata differs: not semantic) -> the stored plan, no solve
    again = client.post("/v1/plans", json={**req, "metadata": {"run": "b"}})
    assert again.status_code == 200 and again.headers["x-plan-cache"] == "hit"
    assert again.json()["id"] == plan["id"]
    # the hash is of the validated body: 10 and 10.0 seconds are one request
    retyped = {**req, "search": {**req["search"], "time_limit_s": 10.0}}
    assert client.post("/v1/plans", json=retyped).json()["id"] == plan["id"]
    fresh = client.post("/v1/plans", params={"refresh": "true"}, json=req)
    assert fresh.status_code == 201 and fresh.json()["id"] != plan["id"]
    assert fresh.json()["request_hash"] == plan["request_hash"]
    listed = [it["id"] for it in client.get("/v1/plans", params={"limit": 200}).json()["items"]]
    assert listed.index(fresh.json()["id"]) < listed.index(plan["id"])  # newest first


def test_plan_infeasible_is_422_with_numbers(client):
    req = {"model": {"name": "llama3-405b"}, "cluster": {"gpu": "a100-40gb", "num_gpus": 1},
           "training": {"global_batch_size": 8, "seq_length": 2048}, "search": {"time_limit_s": 10}}
    r = client.post("/v1/plans", json=req)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "infeasible"
    assert any(ch.isdigit() for ch in err["message"])


def test_plan_spec_error_names_field(client):
    r = client.post("/v1/plans", json={**small_plan(), "cluster": {"gpu": "tpu-v9", "num_gpus": 8}})
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "cluster.gpu"


def test_check(client):
    r = client.post("/v1/check", json={**SMALL, "parallelism": PARALLELISM, "max_slowdown": 10.0,
                                       "search": {"time_limit_s": 10}})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["fits"] is True and isinstance(d["ok"], bool) and "best" in d
