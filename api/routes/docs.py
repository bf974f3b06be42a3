"""The API's description: `/openapi.json`, Swagger UI at `/docs`, ReDoc at `/redoc`. Behind
the bearer token when the service has one (they map every route and field of the service),
unless `PLANNER_PUBLIC_DOCS` opens them.

The two pages load their scripts and styles from cdn.jsdelivr.net (FastAPI's defaults), so
each answers with its own Content-Security-Policy allowing exactly what it loads: the CDN,
Swagger UI's one inline start-up script by its hash, ReDoc's fonts and its search worker
(a blob: URL)."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from ._common import require_token

OPENAPI_URL = "/openapi.json"
CDN = "https://cdn.jsdelivr.net"
FAVICON = "https://fastapi.tiangolo.com"  # FastAPI's default favicon for both pages


def require_docs_token(request: Request) -> None:
    if not request.app.state.settings.public_docs:
        require_token(request)


router = APIRouter(include_in_schema=False, dependencies=[Depends(require_docs_token)])


def inline_script_hashes(html: str) -> list[str]:
    """CSP sources ('sha256-...') of the page's inline <script> elements, as browsers hash them."""
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    return [f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in scripts]


def _swagger_page(title: str) -> HTMLResponse:
    page = get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{title} - Swagger UI")
    html = page.body.decode()
    # Swagger UI sets inline styles as it renders, hence 'unsafe-inline' for styles (not scripts)
    csp = (f"default-src 'none'; script-src {CDN} {' '.join(inline_script_hashes(html))}; "
           f"style-src {CDN} 'unsafe-inline'; img-src 'self' data: {FAVICON}; connect-src 'self'; "
           "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return HTMLResponse(html, headers={"Content-Security-Policy": csp})


def _redoc_page(title: str) -> HTMLResponse:
    page = get_redoc_html(openapi_url=OPENAPI_URL, title=f"{title} - ReDoc")
    # ReDoc styles itself inline, loads Google's fonts, and runs its search in a blob: worker
    csp = (f"default-src 'none'; script-src {CDN}; style-src 'unsafe-inline' https://fonts.googleapis.com; "
           f"font-src https://fonts.gstatic.com; img-src 'self' data: {FAVICON}; worker-src blob:; "
           "child-src blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return HTMLResponse(page.body, headers={"Content-Security-Policy": csp})


@router.get(OPENAPI_URL)
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def swagger(request: Request) -> HTMLResponse:
    return _swagger_page(request.app.title)


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return _redoc_page(request.app.title)
