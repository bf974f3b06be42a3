"""HTTP routes, one module per resource: service (health, metrics: open), and under the
token-guarded /v1 prefix plans, estimate (+ check), profiles, catalog. Handlers turn
pydantic bodies into the request dicts that planner.service takes, so the CLI and the
service answer the same question the same way."""

from __future__ import annotations

from fastapi import FastAPI

from . import catalog, estimate, plans, profiles, service
from ._common import FiniteJSONResponse


def install(app: FastAPI) -> None:
    app.include_router(service.router, default_response_class=FiniteJSONResponse)
    for module in (plans, estimate, profiles, catalog):
        app.include_router(module.router)


__all__ = ["install"]
