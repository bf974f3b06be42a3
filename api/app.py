"""FastAPI app factory of `planner serve`: `create_app(settings=None)`.

uvicorn runs it with `--factory` (one app per process); everything process-local (engine,
solver pool, metrics registry) is built in the lifespan, so replicas share only the database."""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import errors, routes
from .dedupe import InFlight
from .metrics import Metrics, MetricsMiddleware
from .schemas import MAX_PROFILE_BODY_BYTES
from .security import SecurityHeadersMiddleware
from .settings import Settings
from .store import Store, make_engine, migrate
from .worker import SolverPool

log = logging.getLogger("planner.api")

DESCRIPTION = """Auto-parallelism planner: POST a model and a cluster, get DP/TP/PP/CP/EP degrees,
stage boundaries, predicted step time / MFU / memory, and launch artifacts.

Errors always have the body `{"error": {"code", "message", "details"}}`. When the service runs
with `PLANNER_API_TOKEN`, every `/v1` route and this description (`/openapi.json`, `/docs`,
`/redoc`) need `Authorization: Bearer <token>`."""


class BodyLimitMiddleware:
    """413 for bodies over `max_bytes`, whether or not the client sent Content-Length. The
    body is buffered (it is at most max_bytes) and replayed to the app. `path_max_bytes`
    lowers the limit for the paths it names (never raises it)."""

    def __init__(self, app: ASGIApp, max_bytes: int, path_max_bytes: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.path_max_bytes = path_max_bytes or {}

    def limit_bytes(self, scope: Scope) -> int:
        return min(self.max_bytes, self.path_max_bytes.get(scope.get("path", ""), self.max_bytes))

    async def _reject(self, send: Send, max_bytes: int) -> None:
        body = json.dumps({"error": {"code": "payload_too_large",
                                     "message": f"request body over {max_bytes} bytes",
                                     "details": {"max_bytes": max_bytes}}}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        max_bytes = self.limit_bytes(scope)
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    if int(v) > max_bytes:
                        await self._reject(send, max_bytes)
                        return
                except ValueError:
                    pass
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                await self._reject(send, max_bytes)
                return
            chunks.append(chunk)
            more = msg.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        engine = make_engine(settings.sqlalchemy_url())
        migrate(engine)  # upgrades keep stored plans; replicas serialise on a lock
        app.state.store = Store(engine, settings.plans_per_request, settings.plan_retention_s)
        app.state.inflight = InFlight()
        if settings.broker_url:  # scale-out: the solves go to `planner worker` processes
            from .queue import BrokerPool  # noqa: PLC0415 (only with a broker: Dramatiq and Redis)

            app.state.pool = BrokerPool(settings.broker_url, settings.workers, settings.queue_size,
                                        on_depth=metrics.queue_depth.set, results_url=settings.results_url)
        else:
            app.state.pool = SolverPool(settings.workers, settings.queue_size, on_depth=metrics.queue_depth.set,
                                        max_tasks=settings.worker_max_tasks)
        await run_in_threadpool(app.state.pool.warm)  # ready means: worker processes up
        log.info("planner service ready (database %s, %d solver workers, queue %d)",
                 engine.url.render_as_string(hide_password=True), settings.workers, settings.queue_size)
        try:
            yield
        finally:
            app.state.pool.shutdown()
            engine.dispose()

    app = FastAPI(
        title="parallel-planner",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # served by api/routes/docs.py instead, behind the token and with their own CSP
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    errors.install(app)

    routes.install(app)
    # each add wraps the ones before: metrics see the 413s too, and every response they
    # count carries the security headers
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
                       path_max_bytes={"/v1/profiles": MAX_PROFILE_BODY_BYTES})
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(SecurityHeadersMiddleware)
    return app
