"""Security headers on every response the app sends (errors, 413s and assets included).

The web page (api/routes/web.py) loads only its own /assets/ and talks only to this origin,
with no inline script or style, so the default policy allows exactly 'self'. A route that
needs more (the API docs, which load Swagger UI and ReDoc from a CDN) sets its own
Content-Security-Policy, which this middleware leaves as it is."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# the service's own pages: scripts, styles, images and fetches from this origin only; never
# framed (clickjacking), no plugins, no <base> rewriting, forms post only here
APP_CSP = ("default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
           "frame-ancestors 'none'")

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",  # a JSON or SVG body is never sniffed into HTML or script
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate CSP
    "Content-Security-Policy": APP_CSP,
}


class SecurityHeadersMiddleware:
    """Adds SECURITY_HEADERS to each response that does not already set them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
