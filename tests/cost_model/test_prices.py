"""The list-price table (cost_model/hardware/prices.toml): every entry carries its source and
date, every catalog GPU is either priced or says why not, and a user's own table overrides it."""

from __future__ import annotations

import pytest

from cost_model.hardware.catalog import CATALOG
from cost_model.hardware.prices import (
    AS_OF,
    list_table,
    lookup,
    parse_list_table,
    parse_user_prices,
)
from cost_model.specs.errors import SpecError


def test_every_entry_has_a_source_and_a_date():
    prices, _ = list_table()
    assert prices
    for name, p in prices.items():
        assert p.usd_per_gpu_h > 0, name
        assert p.provider and p.url.startswith("https://"), name
        assert AS_OF.match(p.as_of), name
        assert p.url in p.source and p.as_of in p.source and "list price" in p.source, name


def test_every_catalog_gpu_is_priced_or_says_why_not():
    prices, unpriced = list_table()
    assert set(prices) | set(unpriced) == set(CATALOG)
    assert all(reason.strip() for reason in unpriced.values())
    assert not set(prices) - set(CATALOG)  # no price for a GPU the catalog does not know


def test_lookup_prefers_the_users_table():
    user = parse_user_prices({"h100-sxm": 2.0}, "mine.toml")
    p, why = lookup("h100-sxm", user)
    assert why is None and p.usd_per_gpu_h == 2.0 and p.source == "prices file mine.toml"
    listed, _ = lookup("h100-sxm")
    assert listed.usd_per_gpu_h == list_table()[0]["h100-sxm"].usd_per_gpu_h


def test_unpriced_gpu_says_why():
    _, unpriced = list_table()
    gpu = next(iter(unpriced))
    p, why = lookup(gpu)
    assert p is None and unpriced[gpu] in why and "price_per_gpu_hour" in why
    p, why = lookup("my-custom-gpu")
    assert p is None and "not in the list-price table" in why


@pytest.mark.parametrize("entry", [
    {"on_demand_usd_per_gpu_h": 1.0, "provider": "X", "offer": "o", "url": "https://x"},  # no date
    {"on_demand_usd_per_gpu_h": 1.0, "provider": "X", "offer": "o", "url": "https://x", "as_of": "2025"},
    {"on_demand_usd_per_gpu_h": 0, "provider": "X", "offer": "o", "url": "https://x", "as_of": "2025-06"},
    {"on_demand_usd_per_gpu_h": 1.0, "offer": "o", "url": "https://x", "as_of": "2025-06"},  # no provider
])
def test_a_list_entry_without_its_source_date_or_price_is_refused(entry):
    with pytest.raises(SpecError):
        parse_list_table({"gpu": {"h100-sxm": entry}})


@pytest.mark.parametrize("data", [{}, {"h100-sxm": -1}, {"h100-sxm": "cheap"}, {"h100-sxm": float("nan")}, [1]])
def test_a_bad_user_table_is_refused(data):
    with pytest.raises(SpecError):
        parse_user_prices(data, "mine.json")
