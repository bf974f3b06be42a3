"""A plan's page shows its economics (planner/report/page.py economics_html): the time to
train, the cost, tokens per dollar and the price's source, as the plan's economics block has
them; and why a field is missing."""

from __future__ import annotations

from planner.report.page import plan_section
from planner.service import plan

REQ = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
       "training": {"global_batch_size": 32, "seq_length": 2048, "total_tokens": 10**10}, "search": {"time_limit_s": 30}}


def test_plan_page_shows_time_to_train_and_cost():
    p = plan(REQ).model_dump(mode="json")
    e = p["economics"]
    html = plan_section(p, svgs={})
    assert 'id="economics"' in html
    assert f"${e['cost_usd']:,.0f}" in html
    assert e["price_source"] in html


def test_plan_page_says_why_the_cost_is_missing():
    p = plan({**REQ, "cluster": {"gpu": "mi325x", "num_gpus": 8}}).model_dump(mode="json")
    html = plan_section(p, svgs={})
    assert 'id="cost">—' in html and "no price for GPU" in html
