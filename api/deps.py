"""FastAPI dependencies: the process-wide objects a route needs, as `Annotated` types
(`store: StoreDep`), built once in the app's lifespan (api/app.py) and looked up here."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .dedupe import InFlight
from .metrics import Metrics
from .settings import Settings
from .store import Store
from .worker import SolverPool


def get_store(request: Request) -> Store:
    return request.app.state.store


def get_pool(request: Request) -> SolverPool:
    return request.app.state.pool


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_inflight(request: Request) -> InFlight:
    return request.app.state.inflight


def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


StoreDep = Annotated[Store, Depends(get_store)]
PoolDep = Annotated[SolverPool, Depends(get_pool)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
InFlightDep = Annotated[InFlight, Depends(get_inflight)]
