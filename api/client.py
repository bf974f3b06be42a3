"""Python client of the planner service (httpx).

    from api.client import PlannerClient
    with PlannerClient("http://planner:8000", token="...") as c:
        plan = c.plan({"model": {"name": "llama3-8b"}, "cluster": {...}, "training": {...}})
        print(plan.parallelism.tp, plan.prediction.step_time_s, plan.launch["torchrun"])

`plan`/`get_plan` return `planner.plan.Plan`, `estimate` a `cost_model.specs.results.Estimate`,
`check` a `planner.plan.CheckResult`: the same types the service builds, read from the body
(`Model.model_validate_json`). `last_cache` says whether the last `plan` was a stored answer.

429/503 answers are retried (honouring Retry-After) up to `retries` times; every other
error is raised as `PlannerError(status, code, message, details)`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from cost_model.specs.results import Estimate
from planner.plan import CheckResult, Plan


class PlannerError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


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
        self.last_cache: str | None = None  # X-Plan-Cache of the last plan(): "hit" or "miss"
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
        self.last_cache = r.headers.get("X-Plan-Cache")
        return Plan.model_validate_json(r.content)

    def get_plan(self, plan_id: str) -> Plan:
        return Plan.model_validate_json(self._request("GET", f"/v1/plans/{plan_id}").content)

    def list_plans(self, limit: int = 20, cursor: str | None = None) -> PlanPage:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        d = self._request("GET", "/v1/plans", params=params).json()
        return PlanPage(items=d["items"], next_cursor=d["next_cursor"], total=d["total"])

    def estimate(self, request: dict) -> Estimate:
        return Estimate.model_validate_json(self._request("POST", "/v1/estimate", json=request).content)

    def check(self, request: dict, max_slowdown: float = 0.10) -> CheckResult:
        body = {**request, "max_slowdown": max_slowdown}
        return CheckResult.model_validate_json(self._request("POST", "/v1/check", json=body).content)

    def put_profile(self, profile: dict) -> str:
        return self._request("POST", "/v1/profiles", json=profile).json()["id"]

    def get_profile(self, profile_id: str) -> dict:
        return self._request("GET", f"/v1/profiles/{profile_id}").json()

    def models(self) -> list[dict]:
        return self._request("GET", "/v1/models").json()

    def gpus(self) -> list[dict]:
        return self._request("GET", "/v1/gpus").json()

    def systems(self) -> list[dict]:
        return self._request("GET", "/v1/systems").json()

    def health(self) -> dict:
        return self._request("GET", "/healthz").json()
