"""Acceptance: a real uvicorn, a real headless Chromium (Debian's `chromium`, driven over
the DevTools protocol by Playwright), the form filled for llama3-8b on 8 h100-sxm. The page
must show the plan's degrees and predicted step time (as the API returns them), every
SVG must render with a non-zero size, and the Content-Security-Policy must block nothing.
A screenshot is kept under tests/artifacts/.

Then every field of the form (a pasted config.json, dtype, engine, top-k, time limit and
the pins) reaching the request and the plan it answers with, and an infeasible request whose
banner lists the suggestions the API (and the CLI) give. Their screenshots go to
$PLANNER_TEST_ARTIFACTS, else the test's tmp_path; the path is printed."""

from __future__ import annotations

import contextlib
import json
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


# A Llama-style config.json as Hugging Face publishes it (TinyLlama-1.1B's shape).
HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
    "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4, "vocab_size": 32000,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
    "rope_theta": 10000.0,
}


def _artifacts(tmp_path: Path) -> Path:
    """Where screenshots go: $PLANNER_TEST_ARTIFACTS (CI may collect it), else tmp_path."""
    out = Path(os.environ.get("PLANNER_TEST_ARTIFACTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


@contextlib.contextmanager
def _page(server):
    """A Chromium page on the service's form, recording page errors, what the page's
    Content-Security-Policy refused, the URLs requested and the POST /v1/plans bodies."""
    seen = {"errors": [], "blocked": [], "requested": [], "posted": []}

    def on_request(r):
        seen["requested"].append(r.url)
        if r.method == "POST" and r.url.endswith("/v1/plans"):
            seen["posted"].append(json.loads(r.post_data))

    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: seen["errors"].append(str(e)))
            page.on("console", lambda m: seen["blocked"].append(m.text) if "Content Security Policy" in m.text else None)
            page.on("request", on_request)
            page.goto(server.url + "/")
            yield page, seen
        finally:
            browser.close()
    assert not seen["errors"], seen["errors"]
    assert not seen["blocked"], seen["blocked"]
    assert all(u.startswith(server.url) for u in seen["requested"]), seen["requested"]


def test_every_form_field_reaches_the_plan(make_server, tmp_path):
    """A pasted config.json, fp16, torchtitan, top-k 2, a time limit and pins for tp, pp,
    vpp, micro-batch, recompute, ZeRO and schedule: the posted request carries each where
    the schema has it (engine at the top level), and the plan obeys them and renders."""
    server = make_server()
    with _page(server) as (page, seen):
        page.check("#model-kind-config")
        page.fill("#hf-config", json.dumps(HF_CONFIG, indent=2))
        page.select_option("#gpu", "h100-sxm")
        page.fill("#num-gpus", "8")
        page.fill("#gpus-per-node", "8")
        page.fill("#network", "8 x 400 Gb/s")
        page.fill("#global-batch", "128")
        page.fill("#seq-len", "2048")
        page.select_option("#dtype", "fp16")
        page.select_option("#engine", "torchtitan")
        page.fill("#top-k", "2")
        page.fill("#time-limit", "10")
        for ident, value in (("#pin-tp", "1, 2"), ("#pin-pp", "2"), ("#pin-vpp", "1"), ("#pin-mbs", "1"),
                             ("#pin-recompute", "none,selective"), ("#pin-zero", "2,3"), ("#pin-schedule", "1f1b")):
            page.fill(ident, value)
        page.click("#submit")
        page.wait_for_selector("#plan svg#timeline", timeout=60_000)

        [body] = seen["posted"]
        assert body["engine"] == "torchtitan" and "engine" not in body["search"]
        assert body["model"] == {"hf_config": HF_CONFIG}
        assert body["cluster"]["network"] == "8 x 400 Gb/s"
        assert body["training"] == {"global_batch_size": 128, "seq_length": 2048, "dtype": "fp16"}
        assert body["search"] == {"top_k": 2, "time_limit_s": 10, "tp": [1, 2], "pp": [2], "vpp": [1],
                                  "micro_batch_size": [1], "recompute": ["none", "selective"], "zero": [2, 3],
                                  "schedule": ["1f1b"]}
        plan_id = page.get_attribute("#plan", "data-plan-id")
        plan = httpx.get(f"{server.url}/v1/plans/{plan_id}", timeout=10).json()
        par = plan["parallelism"]
        assert plan["engine"] == "torchtitan" and plan["training"]["dtype"] == "fp16"
        assert par["tp"] in (1, 2) and par["pp"] == 2 and par["vpp"] == 1 and par["micro_batch_size"] == 1
        assert par["recompute"] in ("none", "selective") and par["zero"] in (2, 3) and par["schedule"] == "1f1b"
        assert len(plan["alternatives"]) <= 1  # top-k 2: the best and at most one runner-up
        assert page.inner_text("#degrees") == degrees(par)
        # 32 micro-batches: the timeline folds its steady state and says so
        assert par["num_micro_batches"] == 32
        assert page.locator("#timeline g.fold").count() == 1
        assert "32 micro-batches: warm-up, 1 period" in page.eval_on_selector("#timeline > title", "t => t.textContent")
        # why this plan: the reasons about it listed, torchtitan's ZeRO-1 rule folded behind a summary
        listed = page.inner_text("#reasons")
        assert "engine rule" not in listed and "ZeRO-1" not in listed and "pp=2" in listed
        assert page.locator("#engine-rules").count() == 1 and not page.eval_on_selector("#engine-rules", "d => d.open")
        sizes = page.eval_on_selector_all(
            "#plan svg.plan-figure", "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.width, r.height]; })")
        assert len(sizes) == 4 and all(w > 100 and h > 50 for w, h in sizes), sizes
        shot = _artifacts(tmp_path) / "web_form_fields.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")


def test_infeasible_banner_lists_the_suggestions(make_server, tmp_path):
    """llama3-70b on 8 h100-sxm with tp pinned to 1 and the optimizer kept on the GPU fits
    nowhere (with the optimizer offloaded Megatron's pp=8 fits): the banner shows the message
    and every suggestion of the API's 422 `infeasible` answer, in its order."""
    server = make_server()
    with _page(server) as (page, seen):
        page.select_option("#preset", "llama3-70b")
        page.select_option("#gpu", "h100-sxm")
        page.fill("#num-gpus", "8")
        page.fill("#gpus-per-node", "8")
        page.fill("#global-batch", "64")
        page.fill("#seq-len", "4096")
        page.fill("#time-limit", "10")
        page.fill("#pin-tp", "1")
        page.fill("#pin-offload", "off")
        page.fill("#pin-act-offload", "none")
        page.click("#submit")
        page.wait_for_selector("#error #suggestions li", timeout=60_000)

        [body] = seen["posted"]
        assert body["search"]["tp"] == [1] and body["search"]["optimizer_offload"] == [False]
        assert body["search"]["activation_offload"] == ["none"]
        answer = httpx.post(f"{server.url}/v1/plans", json=body, timeout=60)
        assert answer.status_code == 422
        err = answer.json()["error"]
        assert err["code"] == "infeasible" and err["details"]["suggestions"]
        assert page.get_attribute("#error", "data-code") == "infeasible"
        assert err["message"] in page.inner_text("#error .error-message")
        shown = page.eval_on_selector_all("#suggestions li", "els => els.map(e => e.textContent)")
        assert shown == err["details"]["suggestions"]
        assert page.locator("#plan").count() == 0
        shot = _artifacts(tmp_path) / "web_infeasible.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")


def test_a_bad_pin_is_refused_before_posting(make_server):
    server = make_server()
    with _page(server) as (page, seen):
        page.fill("#pin-pp", "2, four")
        page.click("#submit")
        page.wait_for_selector("#error")
        assert "search.pp: 'four' is not a whole number" in page.inner_text("#error")
        page.fill("#pin-pp", "")
        page.fill("#pin-offload", "maybe")
        page.click("#submit")
        page.wait_for_function("document.querySelector('#error').textContent.includes('maybe')")
        assert "search.optimizer_offload: 'maybe' is not true or false" in page.inner_text("#error")
        assert not seen["posted"]
