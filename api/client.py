"""Python client of the planner service (httpx).

    from api.client import PlannerClient
    with PlannerClient("http://planner:8000", token="...") as c:
        plan = c.plan({"model": {"name": "llama3-8b"}, "cluster": {...}, "training": {...}})
        print(plan.parallelism, plan.prediction["step_time_s"], plan.launch["torchrun"])

429/503 answers are retried (honouring Retry-After) up to `retries` times; every other
error is raised as `PlannerError(status, code, message, details)`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx


class PlannerError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


@dataclass
class Plan:
    id: str
    status: str
    request_hash: str
    parallelism: dict[str, Any]
    stages: list[dict[str, Any]]
    prediction: dict[str, Any]
    launch: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)
    cached: bool = False

    @classmethod
    def from_dict(cls, d: dict, cached: bool = False) -> Plan:
        return cls(id=d["id"], status=d.get("status", ""), request_hash=d.get("request_hash", ""),
                   parallelism=d.get("parallelism", {}), stages=d.get("stages", []),
                   prediction=d.get("prediction", {}), launch=d.get("launch", {}), raw=d, cached=cached)


@dataclass
class Estimate:
    prediction: dict[str, Any]
    stages: list[dict[str, Any]]
    fits: bool
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> Estimate:
        return cls(prediction=d["prediction"], stages=d.get("stages", []), fits=bool(d["fits"]), raw=d)


@dataclass
class CheckResult:
    ok: bool
    fits: bool
    slowdown: float | None
    reasons: list[str]
    estimate: dict[str, Any] | None
    best: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        return cls(ok=bool(d["ok"]), fits=bool(d.get("fits")), slowdown=d.get("slowdown"),
                   reasons=list(d.get("reasons", [])), estimate=d.get("estimate"), best=d.get("best"), raw=d)


@dataclass
class PlanPage:
    items: list[dict[str, Any]]
    next_cursor: str | None
    total: int


class PlannerClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 120.0,
                 retries: int = 5, max_retry_wait_s: float = 30.0, transport: httpx.BaseTransport | None = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport)
        self.retries = retries
        self.max_retry_wait_s = max_retry_wait_s

    def __enter__(self) -> PlannerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        for attempt in range(self.retries + 1):
            r = self._http.request(method, path, **kw)
            if r.status_code in (429, 503) and attempt < self.retries:
                time.sleep(self._retry_wait(r, attempt))
                continue
            if r.status_code >= 400:
                raise self._error(r)
            return r
        raise AssertionError("unreachable")

    def _retry_wait(self, r: httpx.Response, attempt: int) -> float:
        try:
            wait = float(r.headers.get("Retry-After", ""))
        except ValueError:
            wait = min(2.0**attempt * 0.5, self.max_retry_wait_s)  # no usable header: back off
        return max(0.0, min(wait, self.max_retry_wait_s))

    @staticmethod
    def _error(r: httpx.Response) -> PlannerError:
        try:
            e = r.json()["error"]
            return PlannerError(r.status_code, e.get("code", "error"), e.get("message", ""), e.get("details") or {})
        except (ValueError, KeyError, TypeError):
            return PlannerError(r.status_code, "http_error", r.text[:500])

    def plan(self, request: dict, refresh: bool = False) -> Plan:
        r = self._request("POST", "/v1/plans", json=request, params={"refresh": "true"} if refresh else None)
        return Plan.from_dict(r.json(), cached=r.status_code == 200)

    def get_plan(self, plan_id: str) -> Plan:
        return Plan.from_dict(self._request("GET", f"/v1/plans/{plan_id}").json())

    def list_plans(self, limit: int = 20, cursor: str | None = None) -> PlanPage:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        d = self._request("GET", "/v1/plans", params=params).json()
        return PlanPage(items=d["items"], next_cursor=d["next_cursor"], total=d["total"])

    def estimate(self, request: dict) -> Estimate:
        return Estimate.from_dict(self._request("POST", "/v1/estimate", json=request).json())

    def check(self, request: dict, max_slowdown: float = 0.10) -> CheckResult:
        body = {**request, "max_slowdown": max_slowdown}
        return CheckResult.from_dict(self._request("POST", "/v1/check", json=body).json())

    def put_profile(self, profile: dict) -> str:
        return self._request("POST", "/v1/profiles", json=profile).json()["id"]

    def get_profile(self, profile_id: str) -> dict:
        return self._request("GET", f"/v1/profiles/{profile_id}").json()

    def models(self) -> list[dict]:
        return self._request("GET", "/v1/models").json()

    def gpus(self) -> list[dict]:
        return self._request("GET", "/v1/gpus").json()

    def health(self) -> dict:
        return self._request("GET", "/healthz").json()
