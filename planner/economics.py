"""A plan's economics: how many steps the run takes, how long, what it costs and how many
tokens a dollar buys, from the plan's own predicted step time and a GPU-hour price.

The price, first found first used: the request's `cluster.price_per_gpu_hour` (a contract
price), a user's prices file (`planner plan --prices`), the list-price table
(cost_model/hardware/prices.toml, each entry with its provider page and month). No price:
the money fields are null and `reasons` says why.

Formulas (Economics' field descriptions say the same):
  tokens_per_step   = global_batch_size x seq_length
  wall time of a step = step_time_s / goodput   (goodput: the productive fraction of wall time)
  cluster_usd_per_h = num_gpus x usd_per_gpu_h
  tokens_per_dollar = tokens_per_step / (step_time_s / goodput / S_PER_H x cluster_usd_per_h)
  steps             = ceil(total_tokens / tokens_per_step)   (the last step is a whole step)
  time_to_train_s   = steps x step_time_s / goodput
  cost_usd          = time_to_train_s / S_PER_H x cluster_usd_per_h
The interval: time_to_train and cost are linear in the step time, so their p10 / p90 are the
same formulas at the prediction's step_time_s_p10 / _p90 (cost_model/hardware/intervals.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_model.hardware.prices import GpuPrice, lookup
from planner.plan import Economics
from planner.request.schema import Cluster, Training

S_PER_H = 3600.0  # seconds per hour: prices are per GPU-hour
REQUEST_SOURCE = "request: cluster.price_per_gpu_hour"


@dataclass(frozen=True)
class Costing:
    """What a request says about its run's economics, resolved once: the price (or why there
    is none), the tokens to train on and the goodput."""

    usd_per_gpu_h: float | None
    price_source: str | None
    no_price_reason: str | None
    total_tokens: int | None
    goodput: float


def costing(cluster: Cluster, training: Training, gpu: str, user_prices: dict[str, GpuPrice] | None = None) -> Costing:
    """The request's costing for GPU `gpu` (the resolved catalog name): its own price, else
    the user's table, else the list-price table."""
    if cluster.price_per_gpu_hour is not None:
        usd, source, why = cluster.price_per_gpu_hour, REQUEST_SOURCE, None
    else:
        found, why = lookup(gpu, user_prices)
        usd, source = (found.usd_per_gpu_h, found.source) if found else (None, None)
    return Costing(usd, source, why, training.total_tokens, training.goodput)


def economics(c: Costing, step_time_s: float, global_batch_size: int, seq_length: int, num_gpus: int,
              step_time_s_p10: float | None = None, step_time_s_p90: float | None = None) -> Economics:
    """The Economics block of a plan whose step takes `step_time_s`, with the interval of the
    time to train and its cost where the step time's p10 / p90 are given (module docstring)."""
    tokens_per_step = global_batch_size * seq_length
    wall_s_per_step = step_time_s / c.goodput
    reasons = [] if c.no_price_reason is None else [c.no_price_reason]
    steps = time_s = None
    if c.total_tokens is None:
        reasons.append("no training.total_tokens: the time to train and its cost need the tokens to train on")
    else:
        steps = math.ceil(c.total_tokens / tokens_per_step)
        time_s = steps * wall_s_per_step
    cluster_usd_per_h = tokens_per_dollar = cost_usd = None
    if c.usd_per_gpu_h is not None:
        cluster_usd_per_h = num_gpus * c.usd_per_gpu_h
        tokens_per_dollar = tokens_per_step / (wall_s_per_step / S_PER_H * cluster_usd_per_h)
        if time_s is not None:
            cost_usd = time_s / S_PER_H * cluster_usd_per_h
    band: dict[str, float | None] = {}
    for q, t in (("p10", step_time_s_p10), ("p90", step_time_s_p90)):
        scale = None if (t is None or time_s is None) else t / step_time_s
        band[f"time_to_train_h_{q}"] = None if scale is None else time_s * scale / S_PER_H
        band[f"cost_usd_{q}"] = None if (scale is None or cost_usd is None) else cost_usd * scale
    return Economics(
        **band,
        usd_per_gpu_h=c.usd_per_gpu_h, price_source=c.price_source, goodput=c.goodput,
        tokens_per_step=tokens_per_step, cluster_usd_per_h=cluster_usd_per_h, tokens_per_dollar=tokens_per_dollar,
        total_tokens=c.total_tokens, steps=steps, time_to_train_s=time_s,
        time_to_train_h=None if time_s is None else time_s / S_PER_H, cost_usd=cost_usd, reasons=reasons,
    )
