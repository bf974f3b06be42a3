"""HTTP routes, one module per resource. `router` holds the open routes (health, metrics),
`v1` the token-guarded /v1 API. Handlers turn pydantic bodies into the request dicts that
planner.service takes, so the CLI and the service answer the same question the same way."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from . import catalog, estimate, plans, profiles, service
from ._common import COMMON_ERRORS, FiniteJSONResponse, require_token

router = APIRouter(default_response_class=FiniteJSONResponse)
router.include_router(service.router)

v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses={401: COMMON_ERRORS[401]},
               default_response_class=FiniteJSONResponse)
for module in (plans, estimate, profiles, catalog):
    v1.include_router(module.router)

__all__ = ["router", "v1"]
