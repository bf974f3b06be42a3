"""The one error body of the service, `{"error": {"code", "message", "details"}}`, and the
handlers that map every failure a client can provoke onto it (4xx, never 500)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from cost_model.specs.errors import SpecError
from planner.request.schema import (
    MAX_FREEFORM_DEPTH,
    NESTING_TOO_DEEP,
    REQUESTS,
    UNION_TAGS,
    spec_error_from,
)

from .schemas import ProfileIn
from .security import SECURITY_HEADERS

log = logging.getLogger("planner.api")


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers


def error_response(
    status: int, code: str, message: str, details: dict | None = None, headers: dict | None = None
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def spec_error_response(exc: SpecError) -> JSONResponse:
    return error_response(422, "invalid_request", str(exc), exc.to_dict())


def _loc_to_field(loc: tuple | list) -> str:
    # ("body", "cluster", "num_gpus") -> "cluster.num_gpus"; list indices as [i]
    parts: list[str] = []
    for p in loc[1:] if loc and loc[0] == "body" else loc:
        if p in UNION_TAGS:
            continue
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "body"


# route path -> the request model of its body, so a 422 names the allowed values exactly as
# the CLI does (both convert with planner.request.errors.spec_error_from), and an unknown
# profile key is answered with the keys a profile may have
_BODY_MODELS = {"/v1/plans": REQUESTS["plan"], "/v1/estimate": REQUESTS["estimate"], "/v1/check": REQUESTS["check"],
                "/v1/profiles": ProfileIn}


def validation_spec_error(request: Request, exc: RequestValidationError) -> SpecError | None:
    """The first body error as the SpecError the CLI would raise for the same input."""
    for e in exc.errors():
        loc = tuple(e.get("loc", ()))
        if loc[:1] == ("body",) and len(loc) > 1 and not isinstance(loc[1], int):
            try:
                return spec_error_from({**e, "loc": loc[1:]}, _BODY_MODELS.get(request.url.path))
            except Exception:  # noqa: BLE001 - an unforeseen error shape: the generic 422 below
                log.warning("could not convert validation error %r", e, exc_info=True)
                return None
        break
    return None


def nesting_error(request: Request, exc: RequestValidationError) -> SpecError | None:
    """The body's free-form object nested past the schema's limit, if any error says so: the
    same SpecError (and message) the CLI gives for that request file."""
    for e in exc.errors():
        loc = tuple(e.get("loc", ()))
        if e.get("type") == NESTING_TOO_DEEP and loc[:1] == ("body",):
            return spec_error_from({**e, "loc": loc[1:]}, _BODY_MODELS.get(request.url.path))
    return None


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(SpecError)
    async def _spec_error(_: Request, exc: SpecError) -> JSONResponse:
        return spec_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        deep = nesting_error(request, exc)
        if deep is not None:  # a hostile shape, not a mistake in a field: refused as unreadable
            return error_response(400, NESTING_TOO_DEEP, str(deep), {**deep.to_dict(), "max_depth": MAX_FREEFORM_DEPTH})
        errors = []
        for e in exc.errors():
            errors.append({"field": _loc_to_field(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")})
        spec = validation_spec_error(request, exc)
        if spec is not None:
            details = {**spec.to_dict(), "errors": errors}
            if len(errors) > 1:
                return error_response(422, "invalid_request", f"{spec} (and {len(errors) - 1} more)", details)
            return error_response(422, "invalid_request", str(spec), details)
        first = errors[0] if errors else {"field": "body", "message": "invalid"}
        message = f"{first['field']}: {first['message']}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more)"
        return error_response(422, "invalid_request", message, {"field": first["field"], "errors": errors})

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "error")
        return error_response(exc.status_code, code, str(exc.detail), {}, getattr(exc, "headers", None))

    @app.exception_handler(OperationalError)
    async def _db_down(request: Request, exc: OperationalError) -> JSONResponse:
        # the database, not the request, is at fault: tell clients to come back
        log.error("database error on %s %s: %s", request.method, request.url.path, exc)
        return error_response(503, "database_unavailable", "the database is unavailable; retry later", {},
                              {"Retry-After": "5"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A server fault, not something the client sent (client input is caught in the
        # handlers and answered 422). Logged with the traceback; the body stays the contract.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        # sent by Starlette's outermost error middleware, outside SecurityHeadersMiddleware
        return error_response(500, "internal", "internal error; the request was logged", {}, dict(SECURITY_HEADERS))
