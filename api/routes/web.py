"""The web page: `GET /` (a form that posts to POST /v1/plans and shows the plan with its
pictures), `GET /sweep` (choose the cluster: a form that posts GPU types x counts to
POST /v1/sweeps and shows the cost-vs-time picture, the front and the chosen point),
`GET /v1/plans/{id}/report.html` (the same page for a stored plan; `?fragment=1`
gives only the plan section, which the form page injects), `GET /v1/plans/{id}/{picture}.svg`,
and the page's assets under `/assets/` (package data of planner.report: nothing is fetched
from a CDN or the network).

The pictures are `planner.report`'s (hand-written SVG, part of the planner package)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from cost_model.specs.vocab import Engine, TrainDtype, values
from planner import report
from planner.report import page

from ..catalog import gpus_table, models_table
from ..deps import StoreDep
from ..errors import ApiError
from ..responses import ErrorBody
from ._common import COMMON_ERRORS, require_token

router = APIRouter(tags=["web"])
v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], tags=["web"], responses={401: COMMON_ERRORS[401]})
NOT_FOUND = {404: {"model": ErrorBody, "description": "unknown plan id (or picture)"}}
HTML = {"content": {"text/html": {"schema": {"type": "string"}}}, "description": "the plan report (HTML)"}
SVG = {"content": {"image/svg+xml": {"schema": {"type": "string"}}}, "description": "the picture (SVG)"}

ASSET_TYPES = {"report.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index() -> HTMLResponse:
    form = page.form_html(models_table(), gpus_table(), values(Engine), values(TrainDtype))
    body = (f"{form}<div id=\"result\" aria-live=\"polite\"></div>"
            "<p class=\"muted\"><a href=\"/sweep\">choose the cluster</a> (GPU types x counts, cost vs time) · "
            "REST API: <a href=\"/docs\">/docs</a> · <a href=\"/openapi.json\">/openapi.json</a></p>")
    return HTMLResponse(page.page_html(body, subtitle="plan a parallel configuration"))


@router.get("/sweep", response_class=HTMLResponse, include_in_schema=False)
async def sweep_page() -> HTMLResponse:
    form = page.sweep_form_html(models_table(), gpus_table(), values(Engine))
    body = (f"{form}<div id=\"sweep-result\" aria-live=\"polite\"></div>"
            "<p class=\"muted\"><a href=\"/\">plan one configuration</a> · REST: POST /v1/sweeps "
            "(<a href=\"/docs\">/docs</a>)</p>")
    return HTMLResponse(page.page_html(body, title="choose the cluster", subtitle="choose the cluster: cost vs time to train"))


@router.get("/assets/{name}", include_in_schema=False)
async def assets(name: str) -> Response:
    if name not in ASSET_TYPES:
        raise ApiError(404, "not_found", f"no asset {name!r}", {"name": name})
    return Response(page.asset(name), media_type=ASSET_TYPES[name], headers={"Cache-Control": "public, max-age=3600"})


async def _stored(store: StoreDep, plan_id: str) -> dict:
    text = await run_in_threadpool(store.get_plan_json, plan_id)
    if text is None:
        raise ApiError(404, "not_found", f"no plan {plan_id!r}", {"id": plan_id})
    return json.loads(text)


@v1.get("/plans/{plan_id}/report.html", response_class=Response,
        responses={200: HTML, **NOT_FOUND, 422: COMMON_ERRORS[422]})
async def plan_report(
    plan_id: str,
    store: StoreDep,
    fragment: Annotated[bool, Query(description="only the plan section (what the form page injects)")] = False,
) -> HTMLResponse:
    """The plan with its pictures, reasons and launch artifacts, as a web page."""
    plan = await _stored(store, plan_id)
    section = await run_in_threadpool(page.plan_section, plan)
    if fragment:
        return HTMLResponse(section)
    return HTMLResponse(page.page_html(section, title=f"plan {plan_id}", subtitle="plan report"))


@v1.get("/plans/{plan_id}/{picture}.svg", response_class=Response,
        responses={200: SVG, **NOT_FOUND})
async def plan_picture(plan_id: str, picture: str, store: StoreDep) -> Response:
    """One picture of a stored plan: timeline, breakdown, memory or alternatives."""
    if picture not in report.PICTURES:
        raise ApiError(404, "not_found", f"no picture {picture!r}", {"allowed": list(report.PICTURES)})
    plan = await _stored(store, plan_id)
    svg = await run_in_threadpool(report.PICTURES[picture], plan)
    return Response(svg, media_type="image/svg+xml")
