"""HTTP routes, one module per resource: service (health, metrics: open), docs (the OpenAPI
description and its pages, behind the token), and under the
token-guarded /v1 prefix plans, estimate (+ check), profiles, catalog, sweeps; the web page
(form and assets open, a stored plan's report under /v1). Handlers turn
pydantic bodies into the request dicts that planner.service takes, so the CLI and the
service answer the same question the same way."""

from __future__ import annotations

from fastapi import FastAPI

from . import catalog, docs, estimate, plans, profiles, service, sweeps, web
from ._common import FiniteJSONResponse


def install(app: FastAPI) -> None:
    app.include_router(service.router, default_response_class=FiniteJSONResponse)
    # /openapi.json, /docs, /redoc: behind the token unless PLANNER_PUBLIC_DOCS
    app.include_router(docs.router)
    for module in (plans, estimate, profiles, catalog, sweeps):
        app.include_router(module.router)
    # the web page (form, assets) is open; a stored plan's report sits behind the token
    app.include_router(web.router)
    app.include_router(web.v1)


__all__ = ["install"]
