"""The service under hostile input, over real HTTP against a live uvicorn: bodies nested
past the schema's limit, floods of junk methods and paths against the metrics' labels,
profile uploads with unknown fields or oversized bodies, and the safe defaults (no empty
token, docs behind the token, security headers, no database detail in /healthz)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import string
import subprocess
import sys
import uuid

import httpx
import pytest

from api.schemas import MAX_PROFILE_BODY_BYTES
from planner.request.schema import MAX_FREEFORM_DEPTH

from .conftest import PARALLELISM, ROOT, SMALL, _postgres_admin_url, small_plan


def nested(levels: int, leaf: object = 1) -> object:
    """Objects and lists alternating, `levels` containers deep."""
    value = leaf
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


def deep_body(field: str, levels: int) -> dict:
    """A plan request whose free-form `field` nests `levels` containers (itself included)."""
    inner = {"x": nested(levels - 1)}
    if field == "metadata":
        return {**small_plan(), "metadata": inner}
    return {**small_plan(), "model": {"hf_config": inner}}


# ------------------------------------------------------------------ nesting depth


@pytest.mark.parametrize("field, path", [("metadata", "metadata"), ("hf_config", "model.hf_config")])
@pytest.mark.parametrize("levels", [MAX_FREEFORM_DEPTH + 1, 500])
def test_deep_free_form_object_is_400_naming_field_and_limit(client, field, path, levels):
    for route in ("/v1/plans", "/v1/estimate"):
        body = deep_body(field, levels)
        if route == "/v1/estimate":
            body = {**body, "parallelism": PARALLELISM}
            body.pop("search")
        r = client.post(route, json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "nesting_too_deep"
        assert err["details"]["field"] == path and err["details"]["max_depth"] == MAX_FREEFORM_DEPTH
        assert path in err["message"] and str(MAX_FREEFORM_DEPTH) in err["message"]


def test_free_form_object_at_the_limit_is_accepted(client):
    body = {**SMALL, "parallelism": PARALLELISM, "metadata": {"x": nested(MAX_FREEFORM_DEPTH - 1)}}
    r = client.post("/v1/estimate", json=body)
    assert r.status_code == 200, r.text


def test_depth_beyond_the_json_parser_is_400_not_500(client):
    # deeper than Python's json parser recurses: refused while parsing, still a 400
    text = '{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = client.post("/v1/plans", content=text.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "error" in r.json()


def test_cli_refuses_the_same_request_file_with_the_same_message(client, tmp_path):
    body = deep_body("metadata", 500)
    api = client.post("/v1/plans", json=body).json()["error"]["message"]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(body))
    for command in ("plan", "estimate"):
        run = subprocess.run([sys.executable, "-m", "api.cli", command, "--request", str(path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip() == f"error: {api}"


# ------------------------------------------------------------------ metrics labels

JUNK_REQUESTS = 500
METRICS_MAX_BYTES = 100_000


def test_junk_methods_and_paths_do_not_grow_the_metrics(make_server):
    srv = make_server()
    rnd = random.Random(7)

    def word(n: int) -> str:
        return "".join(rnd.choice(string.ascii_uppercase) for _ in range(n))

    methods, paths = set(), set()
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        for i in range(JUNK_REQUESTS):
            method = "X" + word(9)
            # the open health route, an unknown path, and a templated route with a random id
            path = ("/healthz", f"/{word(8).lower()}/{word(6).lower()}", f"/v1/plans/p_{word(12).lower()}")[i % 3]
            methods.add(method)
            paths.add(path)
            c.request(method, path)
        c.get(f"/nowhere-{word(6).lower()}")  # an unknown path with a standard method
        body = c.get("/metrics").content
    text = body.decode()
    print(f"/metrics after {JUNK_REQUESTS} junk requests: {len(body)} bytes")
    assert len(body) < METRICS_MAX_BYTES
    assert not any(m in text for m in methods)
    assert not any(p in text for p in paths if p != "/healthz")
    assert 'method="other",route="/healthz",status="405"' in text
    assert 'method="other",route="unmatched",status="404"' in text
    assert 'method="other",route="/v1/plans/{plan_id}",status="405"' in text
    assert 'method="GET",route="unmatched",status="404"' in text


# ------------------------------------------------------------------ profiles

PROFILE = {"schema_version": 1, "device": "a100-80gb", "source": "test",
           "layers": [{"kind": "block", "tp": 2, "micro_batch_size": 1, "seq_length": 2048,
                       "fwd_s": 0.004, "bwd_s": 0.008, "activation_bytes": 3.0e8}], "comm": [], "gemm": []}

# every top-level key profiler/run.py writes, as it writes them
PROFILER_OUTPUT = {**PROFILE, "device_name": "NVIDIA A100-SXM4-80GB", "torch_version": "2.8.0", "cuda_version": "12.8",
                   "dtype": "bf16", "threads": None, "clock": "cuda_events",
                   "model": {"name": "llama3-8b", "hidden_size": 4096, "moe": None},
                   "comm": [{"collective": "all_reduce", "level": "intra", "alpha_s": 1e-5, "beta_s_per_byte": 1e-11,
                             "world_size": 8, "backend": "nccl", "statistic": "mean", "points": [[4096, 2e-5]]}],
                   "memory_bound": [{"bytes": 1e8, "kernels": 1, "time_s": 1e-4}],
                   "attention": [{"flops": 3.4e7, "time_s": 5.9e-4, "batch": 1}],
                   "skipped": [], "elapsed_s": 12.5, "metadata": {"cluster": "a"}}


def test_profile_with_unknown_field_is_422_naming_it(client):
    r = client.post("/v1/profiles", json={**PROFILE, "junk": "x" * 1000})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["details"]["field"] == "junk" and "unknown field 'junk'" in err["message"]
    assert {"layers", "comm", "metadata"} <= set(err["details"]["allowed"])


def test_profile_as_the_profiler_writes_it_is_stored_as_sent(client):
    r = client.post("/v1/profiles", json=PROFILER_OUTPUT)
    assert r.status_code == 201, r.text
    got = client.get(r.headers["location"]).json()
    assert {k: got[k] for k in PROFILER_OUTPUT} == PROFILER_OUTPUT
    assert set(got) == {*PROFILER_OUTPUT, "id", "created_at"}  # no defaults added


def test_profile_nested_too_deep_is_400(client):
    r = client.post("/v1/profiles", json={**PROFILE, "model": {"x": nested(100)}})
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "model"


def test_profile_body_over_its_cap_is_413_even_when_other_routes_allow_more(make_server):
    big = 16 * 1024 * 1024
    srv = make_server(PLANNER_MAX_BODY_BYTES=str(big), PLANNER_API_TOKEN="t")
    headers = {"Authorization": "Bearer t", "content-type": "application/json"}
    over = json.dumps({**PROFILE, "source": "x" * MAX_PROFILE_BODY_BYTES}).encode()
    with httpx.Client(base_url=srv.url, timeout=60, headers=headers) as c:
        r = c.post("/v1/profiles", content=over)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["details"]["max_bytes"] == MAX_PROFILE_BODY_BYTES
        # the same body on another route passes the body limit (and is refused as no estimate request)
        assert c.post("/v1/estimate", content=over).status_code == 422


# ------------------------------------------------------------------ safe defaults

EMPTY_TOKEN = "is set but empty; give a token, or unset PLANNER_API_TOKEN to run without authentication"


@pytest.mark.parametrize("token", ["", "   "])
def test_empty_token_refuses_to_start(make_server, token):
    srv = make_server(wait=False, PLANNER_API_TOKEN=token)
    assert srv.proc.wait(timeout=60) != 0  # uvicorn's app factory fails: no server without auth
    assert EMPTY_TOKEN in srv.log.read_text()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PLANNER_API_TOKEN": token}
    run = subprocess.run([sys.executable, "-m", "api.cli", "serve", "--port", "0"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == f"error: PLANNER_API_TOKEN: {EMPTY_TOKEN}"


DOCS = ("/openapi.json", "/docs", "/redoc")


def test_docs_need_the_token(server, client):
    for path in DOCS:
        r = httpx.get(server.url + path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", path
        assert client.get(path).status_code == 200, path
    assert "/v1/plans" in client.get("/openapi.json").json()["paths"]


def test_public_docs_setting_opens_only_the_docs(make_server):
    srv = make_server(PLANNER_API_TOKEN="t", PLANNER_PUBLIC_DOCS="true")
    for path in DOCS:
        assert httpx.get(srv.url + path).status_code == 200, path
    assert httpx.get(srv.url + "/v1/models").status_code == 401


def test_security_headers_on_every_response(server, client):
    responses = {
        "page": httpx.get(server.url + "/"),
        "asset": httpx.get(server.url + "/assets/app.js"),
        "health": httpx.get(server.url + "/healthz"),
        "metrics": httpx.get(server.url + "/metrics"),
        "401": httpx.get(server.url + "/v1/models"),
        "200": client.get("/v1/models"),
        "404": client.get("/nowhere"),
        "405": client.request("BREW", "/healthz"),
        "413": client.post("/v1/estimate", content=b"[" + b"1," * 600_000 + b"1]",
                           headers={"content-type": "application/json"}),
        "422": client.post("/v1/estimate", json={}),
    }
    for what, r in responses.items():
        assert r.headers["x-content-type-options"] == "nosniff", what
        assert r.headers["x-frame-options"] == "DENY", what
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, what
    # the page loads only same-origin files, which that policy allows
    page = responses["page"].text
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources and all(s.startswith("/") and not s.startswith("//") for s in sources), sources
    assert "<script>" not in page and "style=" not in page  # nothing inline for the policy to block


def test_docs_pages_allow_exactly_what_they_load(client):
    page = client.get("/docs")
    csp = page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in csp
    for url in re.findall(r'(?:src|href)="(https://[^"/]+)/', page.text):
        assert url in csp, url  # the CDN (and the favicon's host)
    inline = re.findall(r"<script>(.*?)</script>", page.text, flags=re.DOTALL)
    assert len(inline) == 1
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    redoc = client.get("/redoc")
    assert "worker-src blob:" in redoc.headers["content-security-policy"]
    for url in re.findall(r'(?:src|href)="(https://[^"/]+)/', redoc.text):
        assert url in redoc.headers["content-security-policy"], url


@pytest.mark.postgres
def test_healthz_hides_the_database_error(make_server):
    # PostgreSQL's own error names host, port and database: a database dropped under a running
    # server is the real case (SQLite's SELECT 1 needs no file once connected)
    admin = _postgres_admin_url()
    if admin is None:
        pytest.skip("PostgreSQL not reachable at 127.0.0.1:5432 (or PLANNER_TEST_POSTGRES_URL)")
    import psycopg

    name = f"planner_health_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        base = admin.rpartition("/")[0].replace("postgresql://", "postgresql+psycopg://")
        srv = make_server(PLANNER_DATABASE_URL=f"{base}/{name}")
        assert httpx.get(srv.url + "/healthz").status_code == 200
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    r = httpx.get(srv.url + "/healthz")
    assert r.status_code == 503
    assert r.json() == {"error": {"code": "unavailable", "message": "database unavailable", "details": {}}}
    host, port = admin.split("@")[1].split("/")[0].split(":")
    for secret in (name, host, port):
        assert secret not in r.text
    assert name in srv.log.read_text()  # the detail is in the server's log
