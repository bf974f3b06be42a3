"""GPU prices, US dollars per GPU-hour: the list-price table (prices.toml beside this module,
every entry with its provider page and the month the price stood at) and a user's own table
(gpu -> price, a contract), which overrides it.

The numbers live in the data file only; this module reads and checks them. A GPU the table
does not price has a reason instead (the file's [unpriced] table, or "not in the table"), so a
plan can say why it reports no cost."""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cost_model.specs.errors import SpecError

TABLE_PATH = Path(__file__).with_name("prices.toml")
# the keys every [gpu.NAME] entry of a list-price table must carry (the price and its source)
REQUIRED_KEYS = ("on_demand_usd_per_gpu_h", "provider", "offer", "url", "as_of")
OPTIONAL_KEYS = ("reserved_usd_per_gpu_h", "reserved_term")
AS_OF = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")  # the month a list price stood at: YYYY-MM


@dataclass(frozen=True)
class GpuPrice:
    """One GPU's price: on-demand US dollars per GPU-hour, and where it comes from."""

    gpu: str
    usd_per_gpu_h: float
    source: str  # one line: provider, offer, page and month, or the user's file
    provider: str | None = None
    url: str | None = None
    as_of: str | None = None  # YYYY-MM
    reserved_usd_per_gpu_h: float | None = None
    reserved_term: str | None = None


def _price(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise SpecError(where, f"must be a price in USD per GPU-hour > 0, got {value!r}", allowed="> 0")
    return float(value)


def parse_list_table(data: dict, where: str = "prices.toml") -> tuple[dict[str, GpuPrice], dict[str, str]]:
    """A list-price table ({gpu: {NAME: entry}, unpriced: {NAME: reason}}) -> the prices and the
    reasons of the GPUs it leaves unpriced. Every entry names its provider, offer, page and month."""
    prices: dict[str, GpuPrice] = {}
    for name, e in (data.get("gpu") or {}).items():
        at = f"{where}: gpu.{name}"
        if not isinstance(e, dict):
            raise SpecError(at, "must be a table")
        missing = [k for k in REQUIRED_KEYS if not e.get(k)]
        unknown = sorted(set(e) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
        if missing or unknown:
            raise SpecError(at, f"missing {missing}, unknown {unknown}", allowed=list(REQUIRED_KEYS + OPTIONAL_KEYS))
        if not AS_OF.match(str(e["as_of"])):
            raise SpecError(f"{at}.as_of", f"must be YYYY-MM, got {e['as_of']!r}", allowed="YYYY-MM")
        reserved = e.get("reserved_usd_per_gpu_h")
        prices[name] = GpuPrice(
            gpu=name,
            usd_per_gpu_h=_price(e["on_demand_usd_per_gpu_h"], f"{at}.on_demand_usd_per_gpu_h"),
            source=f"list price, {e['provider']} on-demand ({e['offer']}), {e['url']}, as of {e['as_of']}",
            provider=e["provider"], url=e["url"], as_of=e["as_of"],
            reserved_usd_per_gpu_h=None if reserved is None else _price(reserved, f"{at}.reserved_usd_per_gpu_h"),
            reserved_term=e.get("reserved_term"),
        )
    unpriced = {str(k): str(v) for k, v in (data.get("unpriced") or {}).items()}
    both = sorted(set(prices) & set(unpriced))
    if both:
        raise SpecError(where, f"{both} both priced and unpriced")
    return prices, unpriced


@cache
def list_table() -> tuple[dict[str, GpuPrice], dict[str, str]]:
    """The shipped list-price table (prices.toml), read once."""
    with TABLE_PATH.open("rb") as f:
        return parse_list_table(tomllib.load(f), TABLE_PATH.name)


def parse_user_prices(data: Any, where: str) -> dict[str, GpuPrice]:
    """A user's own table: {gpu name: USD per GPU-hour} (a contract price), each entry sourced
    as `where` (the file it came from)."""
    if not isinstance(data, dict) or not data:
        raise SpecError(where, "must map GPU names to USD per GPU-hour, e.g. {\"h100-sxm\": 2.1}")
    return {str(gpu): GpuPrice(gpu=str(gpu), usd_per_gpu_h=_price(v, f"{where}: {gpu}"), source=f"prices file {where}")
            for gpu, v in data.items()}


def lookup(gpu: str, user: dict[str, GpuPrice] | None = None) -> tuple[GpuPrice | None, str | None]:
    """The price of `gpu`: the user's table first, then the list table; else None and why."""
    if user and gpu in user:
        return user[gpu], None
    prices, unpriced = list_table()
    if gpu in prices:
        return prices[gpu], None
    why = unpriced.get(gpu) or "not in the list-price table (cost_model/hardware/prices.toml)"
    return None, f"no price for GPU {gpu!r}: {why}; give cluster.price_per_gpu_hour"
