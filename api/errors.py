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
from planner.request.errors import every_error, one_error, spec_error_from, spec_errors_from
from planner.request.schema import MAX_FREEFORM_DEPTH, NESTING_TOO_DEEP, REQUESTS, UNION_TAGS

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
    """The 422 of bad input: the message names every error (as the CLI's `error:` lines do);
    `details` holds the leading one's field, message, allowed values and suggestion, and
    `details.errors` each of them in the same form."""
    return error_response(422, "invalid_request", str(exc),
                          {**exc.to_dict(), "errors": [e.to_dict() for e in every_error(exc)]})


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


def _body_field(loc: tuple) -> bool:
    return loc[:1] == ("body",) and len(loc) > 1 and not isinstance(loc[1], int)


def validation_spec_error(request: Request, exc: RequestValidationError) -> SpecError | None:
    """The body's errors as the SpecError the CLI would raise for the same input (all of them,
    ordered and worded as planner.request.errors does); None where some error is not a body
    field's (a query parameter, a body that is no object)."""
    errors = [{**e, "loc": tuple(e.get("loc", ()))} for e in exc.errors()]
    if not errors or not all(_body_field(e["loc"]) for e in errors):
        return None
    try:
        return one_error(spec_errors_from([{**e, "loc": e["loc"][1:]} for e in errors], _BODY_MODELS.get(request.url.path)))
    except Exception:  # noqa: BLE001 - an unforeseen error shape: the generic 422 below
        log.warning("could not convert validation errors %r", errors, exc_info=True)
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
        spec = validation_spec_error(request, exc)
        if spec is not None:
            return spec_error_response(spec)
        # not the request schema's fields: pydantic's own words, every error named
        errors = [{"field": _loc_to_field(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()] or [{"field": "body", "message": "invalid", "type": ""}]
        message = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return error_response(422, "invalid_request", message, {"field": errors[0]["field"], "errors": errors})

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
