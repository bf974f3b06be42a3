"""A plan's economics (planner/economics.py): steps, time to train, cost and tokens per dollar
follow from the plan's own step time and the price, which comes from the request first, then a
user's prices file, then the list-price table; no price, no cost, and the reason."""

from __future__ import annotations

import math

import pytest

from cost_model.hardware.prices import list_table, parse_user_prices
from cost_model.specs.errors import SpecError
from planner import service
from planner.economics import REQUEST_SOURCE
from planner.request.errors import validate_as
from planner.request.schema import PlanRequest

GPU = "a100-40gb"
SMALL = {
    "model": {"transformer": {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16,
                              "num_kv_heads": 8, "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu"}},
    "cluster": {"gpu": GPU, "num_gpus": 16},
    "training": {"global_batch_size": 32, "seq_length": 2048},
    "search": {"tp": [1], "pp": [1], "time_limit_s": 60, "targets": []},
}
TOKENS = 1_000_000_000  # not a multiple of 32 x 2048: the last step is a whole step
GOODPUT = 0.8


def _plan(cluster=None, training=None, prices=None):
    req = {**SMALL, "cluster": {**SMALL["cluster"], **(cluster or {})},
           "training": {**SMALL["training"], **(training or {})}}
    return service.plan(req, prices=prices)


def test_time_and_cost_follow_from_the_plans_step_time_and_the_requests_price():
    usd = 1.75
    p = _plan({"price_per_gpu_hour": usd}, {"total_tokens": TOKENS, "goodput": GOODPUT})
    e, step_s = p.economics, p.prediction.step_time_s
    tokens_per_step = 32 * 2048
    steps = -(-TOKENS // tokens_per_step)  # ceiling division
    wall_s = steps * step_s / GOODPUT
    assert e.price_source == REQUEST_SOURCE and e.usd_per_gpu_h == usd
    assert e.tokens_per_step == tokens_per_step and e.steps == steps and e.total_tokens == TOKENS
    assert e.time_to_train_s == pytest.approx(wall_s, rel=1e-12)
    assert e.time_to_train_h == pytest.approx(wall_s / 3600, rel=1e-12)
    assert e.cluster_usd_per_h == pytest.approx(16 * usd)
    assert e.cost_usd == pytest.approx(wall_s / 3600 * 16 * usd, rel=1e-12)
    # a dollar buys the same tokens per step as over the whole run
    assert e.tokens_per_dollar == pytest.approx(steps * tokens_per_step / e.cost_usd, rel=1e-12)
    assert e.reasons == []


def test_the_requests_price_overrides_the_table_and_the_table_names_its_source():
    listed = list_table()[0][GPU]
    table = _plan(training={"total_tokens": TOKENS}).economics
    assert table.usd_per_gpu_h == listed.usd_per_gpu_h and table.price_source == listed.source
    assert listed.url in table.price_source and listed.as_of in table.price_source
    own = _plan({"price_per_gpu_hour": listed.usd_per_gpu_h / 2}, {"total_tokens": TOKENS}).economics
    assert own.price_source == REQUEST_SOURCE and own.cost_usd == pytest.approx(table.cost_usd / 2, rel=1e-12)


def test_a_users_prices_override_the_table_but_not_the_request():
    user = parse_user_prices({GPU: 0.5}, "contract.toml")
    e = _plan(training={"total_tokens": TOKENS}, prices=user).economics
    assert e.usd_per_gpu_h == 0.5 and e.price_source == "prices file contract.toml"
    e = _plan({"price_per_gpu_hour": 3.0}, {"total_tokens": TOKENS}, prices=user).economics
    assert e.usd_per_gpu_h == 3.0 and e.price_source == REQUEST_SOURCE


def test_no_price_means_no_cost_and_says_why():
    gpu = {"base": GPU, "name": "my-a100"}  # a custom GPU: no list price
    p = _plan({"gpu": gpu}, {"total_tokens": TOKENS})
    e = p.economics
    assert e.usd_per_gpu_h is None and e.cost_usd is None and e.tokens_per_dollar is None
    assert e.cluster_usd_per_h is None and e.price_source is None
    assert any("no price for GPU 'my-a100'" in r and "price_per_gpu_hour" in r for r in e.reasons)
    # the run's time does not need a price
    assert e.time_to_train_s == pytest.approx(e.steps * p.prediction.step_time_s, rel=1e-12)


def test_without_total_tokens_only_the_per_step_economics():
    e = _plan().economics
    assert e.steps is None and e.time_to_train_s is None and e.cost_usd is None
    assert e.tokens_per_dollar is not None and math.isfinite(e.tokens_per_dollar)
    assert any("total_tokens" in r for r in e.reasons)


@pytest.mark.parametrize("cluster, training", [
    ({"price_per_gpu_hour": 0}, {}), ({"price_per_gpu_hour": -1.0}, {}),
    ({}, {"goodput": 0}), ({}, {"goodput": 1.5}), ({}, {"total_tokens": 0}),
])
def test_bad_economics_fields_are_refused(cluster, training):
    req = {**SMALL, "cluster": {**SMALL["cluster"], **cluster}, "training": {**SMALL["training"], **training}}
    with pytest.raises(SpecError):
        validate_as(PlanRequest, req)
