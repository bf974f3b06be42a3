"""Acceptance: the "choose the cluster" page (GET /sweep) in a real headless Chromium against
a real uvicorn shows the same Pareto front and chosen point as `planner sweep --json` (a
subprocess) for the same request; a screenshot is kept (tmp path, or $PLANNER_TEST_ARTIFACTS)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("PLANNER_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")

GPUS = ("a100-80gb", "h100-sxm", "b200")
COUNTS = "8,16"
TOKENS = "10000000000"
DEADLINE = "2"


def _cli() -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "api.cli", "sweep", "--model", "llama3-8b", "--gpu", ",".join(GPUS), "--gpus", COUNTS,
         "--global-batch", "32", "--seq-len", "2048", "--total-tokens", TOKENS, "--deadline-days", DEADLINE,
         "--time-limit", "30", "--out", os.devnull, "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_page_shows_the_cli_front(make_server, tmp_path):
    server = make_server()
    errors: list[str] = []
    posted: list[dict] = []
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: posted.append(json.loads(r.post_data)) if r.method == "POST" else None)
            page.goto(server.url + "/sweep")
            page.select_option("#sweep-preset", "llama3-8b")
            for box in page.query_selector_all("input.sweep-gpu"):
                (box.check if box.get_attribute("value") in GPUS else box.uncheck)()
            page.fill("#sweep-counts", COUNTS)
            page.fill("#sweep-batch", "32")
            page.fill("#sweep-seq", "2048")
            page.fill("#sweep-tokens", TOKENS)
            page.fill("#sweep-deadline", DEADLINE)
            page.fill("#sweep-time-limit", "30")
            page.click("#sweep-submit")
            page.wait_for_selector("#sweep-front li", timeout=120_000)
            shown = [(li.get_attribute("data-gpu"), int(li.get_attribute("data-num-gpus")))
                     for li in page.query_selector_all("#sweep-front li")]
            chosen_rows = [(tr.get_attribute("data-gpu"), int(tr.get_attribute("data-num-gpus")))
                           for tr in page.query_selector_all("#sweep-table tr.chosen")]
            drawn = page.eval_on_selector_all("#sweep-figure svg path.point", "els => els.length")
            choice = page.inner_text("#sweep-choice")
            box = page.eval_on_selector("#sweep-figure svg", "e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; }")
            out = Path(os.environ.get("PLANNER_TEST_ARTIFACTS") or tmp_path)
            out.mkdir(parents=True, exist_ok=True)
            shot = out / "web_sweep_front.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}")
        finally:
            browser.close()
    assert not errors, errors
    [body] = posted
    assert body["sweep"]["gpu"] == list(GPUS) and body["sweep"]["num_gpus"] == [8, 16]
    assert body["sweep"]["deadline_days"] == 2 and body["training"]["total_tokens"] == int(TOKENS)
    assert shot.stat().st_size > 10_000 and box[0] > 300 and box[1] > 200

    cli = _cli()
    cli_front = [(cli["points"][i]["gpu"], cli["points"][i]["num_gpus"]) for i in cli["front"]]
    assert shown == cli_front and len(shown) >= 1
    cli_chosen = cli["points"][cli["chosen"]]
    assert chosen_rows == [(cli_chosen["gpu"], cli_chosen["num_gpus"])]
    assert choice == cli["choice"]
    assert drawn == sum(1 for p in cli["points"] if p["ok"] and p["economics"]["cost_usd"] is not None)
