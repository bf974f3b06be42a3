"""Acceptance: a real uvicorn, a real headless Chromium (Debian's `chromium`, driven over
the DevTools protocol by Playwright), the form filled for llama3-8b on 8 h100-sxm. The page
must show the plan's degrees and predicted step time (as the API returns them), every
SVG must render with a non-zero size, and the Content-Security-Policy must block nothing.
A screenshot is kept under tests/artifacts/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from planner.report.common import degrees, fmt_time

CHROMIUM = os.environ.get("PLANNER_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")


def test_form_plans_and_draws(make_server):
    server = make_server()
    errors: list[str] = []
    blocked: list[str] = []  # what the Content-Security-Policy refused (the browser logs it)
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
            requested: list[str] = []
            page.on("request", lambda r: requested.append(r.url))
            page.goto(server.url + "/")
            page.select_option("#preset", "llama3-8b")
            page.select_option("#gpu", "h100-sxm")
            page.fill("#num-gpus", "8")
            page.fill("#gpus-per-node", "8")
            page.fill("#global-batch", "64")
            page.fill("#seq-len", "4096")
            page.select_option("#engine", "megatron")
            page.click("#submit")
            page.wait_for_selector("#plan svg#timeline", timeout=60_000)

            plan_id = page.get_attribute("#plan", "data-plan-id")
            plan = httpx.get(f"{server.url}/v1/plans/{plan_id}", timeout=10).json()
            assert plan["cluster"]["num_gpus"] == 8 and plan["model"]["name"] == "llama3-8b"
            assert page.inner_text("#degrees") == degrees(plan["parallelism"])
            assert page.inner_text("#step-time") == fmt_time(plan["prediction"]["step_time_s"])

            sizes = page.eval_on_selector_all(
                "#plan svg.plan-figure",
                "els => els.map(e => { const r = e.getBoundingClientRect(); return [e.id, r.width, r.height]; })",
            )
            assert {s[0] for s in sizes} == {"timeline", "breakdown", "memory", "alternatives"}
            assert all(w > 100 and h > 50 for _, w, h in sizes), sizes
            # the launch artifacts are on the page with copy buttons
            assert page.locator("#launch-megatron button.copy").count() >= 1
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "web_plan.png"), full_page=True)
        finally:
            browser.close()
    assert not errors, errors
    assert not blocked, blocked  # the page works under the service's own policy
    # every request the page made went to the service itself (no CDN)
    assert requested and all(u.startswith(server.url) for u in requested), requested
