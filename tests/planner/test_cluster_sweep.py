"""Choosing the cluster (planner/sweep.py grid, planner/frontier.py): the front is the true
non-dominated set and the chosen point follows the stated rules (both against brute force
written here), each grid point's numbers are the single plan's of the same request, a price
given with the request overrides the list table, and what a sweep over GPU types refuses."""

from __future__ import annotations

import random

import pytest

from cost_model.hardware.prices import list_table
from cost_model.specs.errors import SpecError
from planner.economics import REQUEST_SOURCE, S_PER_H
from planner.frontier import S_PER_DAY, choose, pareto_front
from planner.service import plan
from planner.sweep import grid, sweep, table

TOKENS = 10**10
BASE = {
    "model": {"name": "llama3-8b"},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 8},
    "training": {"global_batch_size": 32, "seq_length": 2048, "total_tokens": TOKENS},
    "search": {"time_limit_s": 30},
}


def _pt(t_s, usd, ok=True):
    return {"ok": ok, "economics": {"time_to_train_s": t_s, "cost_usd": usd}}


def _random_points(rng: random.Random, n: int) -> list[dict]:
    """Times and costs on a coarse grid (so ties happen), some without a price or a plan."""
    out = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.1:
            out.append({"ok": False, "error": "no plan"})
        elif roll < 0.2:
            out.append(_pt(rng.randint(1, 8) * S_PER_DAY, None))
        else:
            out.append(_pt(rng.randint(1, 8) * S_PER_DAY, rng.randint(1, 8) * 1000.0))
    return out


def _brute_front(points: list[dict]) -> set[int]:
    scored = {i: (p["economics"]["time_to_train_s"], p["economics"]["cost_usd"]) for i, p in enumerate(points)
              if p.get("ok") and p["economics"]["cost_usd"] is not None}
    return {i for i, (t, c) in scored.items()
            if not any(t2 <= t and c2 <= c and (t2 < t or c2 < c) for j, (t2, c2) in scored.items() if j != i)}


def test_front_is_the_non_dominated_set():
    rng = random.Random(35)
    for _ in range(400):
        points = _random_points(rng, rng.randint(0, 14))
        front = pareto_front(points)
        assert set(front) == _brute_front(points)
        times = [points[i]["economics"]["time_to_train_s"] for i in front]
        assert times == sorted(times)  # fastest first


def _brute_choice(points, deadline_days, budget):
    scored = [(p["economics"]["time_to_train_s"], p["economics"]["cost_usd"], i) for i, p in enumerate(points)
              if p.get("ok") and p["economics"]["cost_usd"] is not None]
    ok = [s for s in scored if (deadline_days is None or s[0] <= deadline_days * S_PER_DAY)
          and (budget is None or s[1] <= budget)]
    if not ok or (deadline_days is None and budget is None):
        return None
    if deadline_days is not None:
        best_cost = min(s[1] for s in ok)
        return {s[2] for s in ok if s[1] == best_cost and s[0] == min(x[0] for x in ok if x[1] == best_cost)}
    best_t = min(s[0] for s in ok)
    return {s[2] for s in ok if s[0] == best_t and s[1] == min(x[1] for x in ok if x[0] == best_t)}


def test_choice_rules_against_brute_force():
    rng = random.Random(7)
    for _ in range(400):
        points = _random_points(rng, rng.randint(1, 12))
        deadline = rng.choice([None, 2, 4.5, 7])
        budget = rng.choice([None, 2500.0, 5000.0])
        chosen, why = choose(points, deadline, budget)
        want = _brute_choice(points, deadline, budget)
        if want is None:
            assert chosen is None and why
        else:
            assert chosen in want, (points, deadline, budget, chosen, want)
            assert chosen in pareto_front(points)  # the chosen point is always on the front


def test_choice_sentences():
    points = [_pt(10 * S_PER_DAY, 100.0), _pt(2 * S_PER_DAY, 300.0), _pt(5 * S_PER_DAY, 150.0)]
    assert choose(points, deadline_days=6) == (2, "the cheapest point that meets the 6-day deadline: $150 in 5 days")
    assert choose(points, budget_usd=200)[0] == 2  # the fastest within $200
    assert choose(points, budget_usd=1000)[0] == 1
    assert choose(points, deadline_days=6, budget_usd=120)[0] is None
    idx, why = choose(points, deadline_days=1)
    assert idx is None and why.startswith("no point meets the 1-day deadline: the fastest takes 2 days")
    assert choose(points)[0] is None


def _single(gpu: str, n: int, **cluster) -> dict:
    req = {**BASE, "cluster": {"gpu": gpu, "num_gpus": n, **cluster}}
    return plan(req, time_limit_s=30).model_dump(mode="json")


def test_grid_points_equal_single_plans():
    out = grid(BASE, {"gpu": ["a100-80gb", "h100-sxm"], "num_gpus": [8, 16]}, time_limit_s=30, jobs=2,
               deadline_days=10)
    assert [(p["gpu"], p["num_gpus"]) for p in out["points"]] == [
        ("a100-80gb", 8), ("a100-80gb", 16), ("h100-sxm", 8), ("h100-sxm", 16)]
    for p in out["points"]:
        assert p["ok"] and p["status"] == "optimal", p
        single = _single(p["gpu"], p["num_gpus"])
        assert p["parallelism"] == single["parallelism"]
        assert p["step_time_s"] == single["prediction"]["step_time_s"]
        assert p["peak_gib"] == single["prediction"]["memory"]["peak_gib"]
        assert p["economics"] == single["economics"]
        assert p["economics"]["price_source"] == list_table()[0][p["gpu"]].source
    assert out["front"] == pareto_front(out["points"])
    assert out["chosen"] == choose(out["points"], 10)[0]
    assert [i for i, p in enumerate(out["points"]) if p["on_front"]] == sorted(out["front"])
    assert "f: on the time/cost front" in table(out)


def test_request_price_overrides_the_table():
    out = sweep({**BASE, "cluster": {**BASE["cluster"], "price_per_gpu_hour": 1.25}}, "num_gpus", [8, 16])
    for p in out["points"]:
        e = p["economics"]
        assert e["usd_per_gpu_h"] == 1.25 and e["price_source"] == REQUEST_SOURCE
        assert e["cost_usd"] == pytest.approx(e["time_to_train_s"] / S_PER_H * p["num_gpus"] * 1.25)


def test_gpu_sweep_prices_table_overrides_and_fills_in():
    from cost_model.hardware.prices import GpuPrice

    prices = {"a100-80gb": GpuPrice("a100-80gb", 0.9, "contract"), "mi300x": GpuPrice("mi300x", 2.0, "contract")}
    out = grid(BASE, {"gpu": ["a100-80gb", "mi300x"], "num_gpus": [8]}, time_limit_s=30, prices=prices)
    assert list_table()[0]["a100-80gb"].usd_per_gpu_h != 0.9  # the table's own price differs
    for p in out["points"]:
        assert p["economics"]["usd_per_gpu_h"] == prices[p["gpu"]].usd_per_gpu_h
        assert p["economics"]["price_source"] == "contract"
    bare = grid(BASE, {"gpu": ["a100-80gb", "mi325x"], "num_gpus": [8]}, time_limit_s=30)
    mi = bare["points"][1]
    assert "mi325x" not in list_table()[0]
    assert mi["ok"] and mi["economics"]["cost_usd"] is None  # mi325x has no list price
    assert any("--prices" in r for r in mi["economics"]["reasons"])
    assert 1 not in bare["front"]


@pytest.mark.parametrize("cluster,field", [
    ({"price_per_gpu_hour": 2.0}, "cluster.price_per_gpu_hour"),
    ({"gpus_per_node": 8}, "cluster.gpus_per_node"),
    ({"nvlink_domain": 8}, "cluster.nvlink_domain"),
])
def test_gpu_sweep_refuses_one_gpus_facts(cluster, field):
    with pytest.raises(SpecError) as e:
        grid({**BASE, "cluster": {**BASE["cluster"], **cluster}}, {"gpu": ["a100-80gb", "h100-sxm"], "num_gpus": [8]})
    assert e.value.field == field


def test_gpu_sweep_needs_total_tokens():
    req = {**BASE, "training": {"global_batch_size": 32, "seq_length": 2048}}
    with pytest.raises(SpecError) as e:
        grid(req, {"gpu": ["a100-80gb", "h100-sxm"], "num_gpus": [8]})
    assert e.value.field == "training.total_tokens" and "--total-tokens" in e.value.message
    with pytest.raises(SpecError) as e:
        grid(req, {"num_gpus": [8]}, deadline_days=3)
    assert e.value.field == "training.total_tokens"
    assert all(p["ok"] for p in sweep(req, "num_gpus", [8])["points"])  # a plain count sweep needs none


def test_points_that_cannot_run_keep_their_reason():
    # MXFP8 needs Blackwell tensor cores (catalog mxfp8): the H100 point says so, the B200 one plans
    req = {**BASE, "training": {**BASE["training"], "dtype": "fp8", "fp8_recipe": "mxfp8"}}
    out = grid(req, {"gpu": ["h100-sxm", "b200"], "num_gpus": [8]}, time_limit_s=30)
    h100, b200 = out["points"]
    assert not h100["ok"] and "MXFP8 needs Blackwell" in h100["error"]
    assert b200["ok"] and out["front"] == [1]
    # a model that does not fit any count of one GPU type: kept, with the memory reason
    big = {**BASE, "model": {"name": "llama3-70b"}}
    out = grid(big, {"gpu": ["l40s", "h100-sxm"], "num_gpus": [8]}, time_limit_s=30)
    assert not out["points"][0]["ok"] and "no configuration fits" in out["points"][0]["error"]
    # bad at every point: refused
    with pytest.raises(SpecError):
        grid(req, {"gpu": ["h100-sxm", "a100-80gb"], "num_gpus": [8]})


def test_unknown_gpu_is_refused_with_a_suggestion():
    with pytest.raises(SpecError) as e:
        grid(BASE, {"gpu": ["h100", "b200"], "num_gpus": [8]})
    assert e.value.suggestion == "h100-sxm"
