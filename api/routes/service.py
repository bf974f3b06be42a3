"""/healthz and /metrics (open: no token)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ..deps import MetricsDep, PoolDep, StoreDep
from ..responses import Health
from ._common import err

log = logging.getLogger("planner.api")
router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=Health, responses={503: err("database unreachable")})
async def healthz(store: StoreDep, pool: PoolDep):
    try:
        await run_in_threadpool(store.ping)
    except Exception as exc:  # noqa: BLE001 - health reports, never raises
        # the driver's message names the host, port, database and user: logged here, never
        # sent to an unauthenticated caller
        log.error("health check: database unreachable: %s", exc)
        return JSONResponse({"error": {"code": "unavailable", "message": "database unavailable", "details": {}}}, 503)
    return Health(status="ok", database=store.engine.dialect.name, planner=True, queue_depth=pool.depth,
                  busy_workers=pool.busy, workers=pool.workers, queue_capacity=pool.capacity)


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}})
async def metrics(metrics: MetricsDep, pool: PoolDep):
    metrics.queue_depth.set(pool.depth)
    metrics.busy_workers.set(pool.busy)
    return Response(metrics.render(), media_type=metrics.content_type)
