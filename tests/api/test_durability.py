"""SQLite durability: every acknowledged plan/profile survives SIGKILL of the server; the
restart re-runs the (idempotent) migrations and serves them all."""

from __future__ import annotations

import httpx

from .conftest import small_plan


def test_sigkill_restart_keeps_acknowledged(make_server):
    srv = make_server()
    acked: dict[str, dict] = {}
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for i in range(5):
            r = c.post("/v1/profiles", json={"schema_version": 1, "device": "cpu", "source": f"run {i}",
                                             "layers": [], "comm": [], "gemm": []})
            assert r.status_code == 201, r.text
            acked[r.headers["location"]] = r.json()
        for batch in (8, 16):
            r = c.post("/v1/plans", json=small_plan(batch))
            assert r.status_code == 201, r.text
            acked[r.headers["location"]] = r.json()
    srv.kill()  # no shutdown hooks, no flush: only what was committed before the 201 remains
    srv.start()
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for location, body in acked.items():
            r = c.get(location)
            assert r.status_code == 200, (location, r.text)
            for key, value in body.items():
                assert r.json()[key] == value
