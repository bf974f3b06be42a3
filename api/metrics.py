"""Prometheus metrics. Each app owns its registry, so several apps in one process (tests)
do not collide, and /metrics shows exactly this service's series."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SOLVE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("planner_http_requests", "HTTP requests", ["method", "route", "status"], registry=r)
        self.latency = Histogram(
            "planner_http_request_duration_seconds", "HTTP request latency", ["method", "route"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.solve_time = Histogram(
            "planner_solve_duration_seconds", "time one solve ran in a worker process (queue wait apart)", ["kind"],
            buckets=SOLVE_BUCKETS, registry=r,
        )
        self.queue_wait = Histogram(
            "planner_solve_queue_wait_seconds", "time one solve waited for a worker process", ["kind"],
            buckets=SOLVE_BUCKETS, registry=r,
        )
        self.killed = Counter("planner_solves_killed", "solves whose worker process was killed (past their limit, "
                              "or their caller gone)", ["kind"], registry=r)
        self.busy_workers = Gauge("planner_solver_busy_workers", "worker processes running a solve", registry=r)
        self.cache_hits = Counter("planner_plan_cache_hits", "plan requests answered from the store", registry=r)
        self.cache_misses = Counter("planner_plan_cache_misses", "plan requests that were solved", registry=r)
        self.queue_depth = Gauge("planner_solver_queue_depth", "solves waiting for a worker", registry=r)
        self.rejected = Counter("planner_solver_rejected", "solves refused because the queue was full", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


# Label values come from closed sets, so no client can grow /metrics: any other method string
# (HTTP allows any token; a junk-method flood made one series per word) is counted as OTHER,
# and a request that matched no route as UNMATCHED, never by its raw path.
METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})
OTHER_METHOD = "other"
UNMATCHED = "unmatched"


def method_label(method: str) -> str:
    return method if method in METHODS else OTHER_METHOD


def route_label(scope: Scope) -> str:
    """The template of the route the request matched (`/v1/plans/{plan_id}`), else UNMATCHED."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class MetricsMiddleware:
    """Counts every response by method and route template, both from closed sets (above)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            template = route_label(scope)
            method = method_label(scope.get("method", ""))
            self.metrics.requests.labels(method, template, str(status["code"])).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)
