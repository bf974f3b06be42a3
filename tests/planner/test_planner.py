"""Planner contract: determinism, time limit, infeasibility, pins, search-knob errors,
service.check, the CLI (`plan --json`, `--emit`, `check` exit codes), and consistency of the
plan's predicted step time with cost_model.estimate of the plan's own configuration."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cost_model.estimate import estimate
from cost_model.specs.errors import SpecError
from planner import service
from planner.request.parse import parse_cluster, parse_model, parse_parallelism, parse_training
from planner.service import Infeasible

REPO = Path(__file__).resolve().parents[2]

SMALL = {
    "model": {"transformer": {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16,
                              "num_kv_heads": 8, "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu"}},
    "cluster": {"gpu": "a100-40gb", "num_gpus": 16},
    "training": {"global_batch_size": 32, "seq_length": 2048},
}
INFEASIBLE = {
    "model": {"name": "gpt3-175b"},
    "cluster": {"gpu": "a100-40gb", "num_gpus": 8},
    "training": {"global_batch_size": 64, "seq_length": 2048},
}

def _large_layers() -> list[dict]:
    rng = random.Random(0)
    return [{"name": f"l{i}", "fwd_flops": rng.uniform(1, 3) * 1e13, "params": rng.uniform(0.5, 3) * 1e9,
             "activation_bytes": rng.uniform(1, 4) * 2**30, "output_bytes": 2**25} for i in range(96)]


# 96 non-uniform layers on 1024 GPUs: the CP-SAT stage model cannot be proven in 0.5 s
LARGE = {
    "model": {"layers": _large_layers()},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 1024},
    "training": {"global_batch_size": 1024, "seq_length": 2048},
}
# a 96-layer MoE (every other block) on 4096 H100: 65k candidates
LARGE_MOE = {
    "model": {"transformer": {"num_layers": 96, "hidden_size": 8192, "num_attention_heads": 64, "num_kv_heads": 8,
                              "ffn_hidden_size": 28672, "vocab_size": 128256, "mlp": "swiglu",
                              "moe": {"num_experts": 64, "top_k": 2, "ffn_hidden_size": 8192, "layer_freq": 2}}},
    "cluster": {"gpu": "h100-sxm", "num_gpus": 4096},
    "training": {"global_batch_size": 2048, "seq_length": 8192},
}
PAR_KEYS = ("dp", "tp", "pp", "cp", "ep", "vpp", "sequence_parallel", "zero", "micro_batch_size",
            "num_micro_batches", "recompute", "schedule")
PLAN_KEYS = ("id", "status", "request_hash", "parallelism", "stages", "prediction", "launch", "ranks",
             "alternatives", "search", "reasons")
PRED_KEYS = ("step_time_s", "tokens_per_s", "mfu", "hfu", "tflops_per_gpu", "breakdown", "memory")
LAUNCH_KEYS = ("megatron", "torchtitan", "deepspeed", "torchrun", "slurm", "kubernetes", "runtime")
SEARCH_KEYS = ("candidates", "pruned", "ilp_solves", "solve_time_s", "solver", "gap")


def with_search(req: dict, **search) -> dict:
    return {**req, "search": {**req.get("search", {}), **search}}


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def small_plan() -> dict:
    return service.plan(SMALL)


@pytest.fixture(scope="module")
def small_request_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("req") / "req.json"
    p.write_text(json.dumps(SMALL))
    return p


# --------------------------------------------------------------------------- determinism


def test_same_request_same_plan(small_plan):
    again = service.plan(json.loads(json.dumps(SMALL)))
    strip = ("search",)  # only the measured solve time may differ
    a = small_plan.model_dump(mode="json", exclude=set(strip))
    b = again.model_dump(mode="json", exclude=set(strip))
    # each plan has its own id (planner.ids), which its launch artifacts name (the Kubernetes
    # job as p-<digits>): the same plan otherwise
    assert small_plan.id != again.id

    def text(d, pid):
        return json.dumps(d, sort_keys=True, default=str).replace(pid, "ID").replace(pid.replace("_", "-"), "ID")

    assert text(a, small_plan.id) == text(b, again.id)
    timings = {"solve_time_s", "ilp_time_s"}  # only the measured times may differ
    sa = small_plan.search.model_dump(exclude=timings)
    sb = again.search.model_dump(exclude=timings)
    assert sa == sb


class _DelayedSolves:
    """planner.ilp.solve delayed by 50 ms, counting the solves running now and at most."""

    def __init__(self, real_solve):
        import threading

        self.real, self.active, self.peak, self.lock = real_solve, 0, 0, threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            time.sleep(0.05)
            return self.real(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


# Mixtral 8x7B on 32 H100: 13 of its candidates are deferred to the retries
_MIXTRAL_32 = {"model": {"name": "mixtral-8x7b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 32},
               "training": {"global_batch_size": 128, "seq_length": 4096}, "search": {"time_limit_s": 60}}


def test_concurrent_retries_give_the_one_worker_plan():
    """The deferred candidates' CP-SAT solves run two at a time (SearchPolicy.solve_workers): the
    plan, its status and the solves are those of one at a time. Each real solve is delayed
    by 50 ms so that the next is prepared while it runs, and two were seen running at once."""

    from planner.ilp import solve
    from planner.search import Seams, SearchPolicy, search, solve_workers

    if solve_workers(SearchPolicy()) < 2 and SearchPolicy().solve_workers >= 2:
        pytest.skip("one CPU available: the retries run one at a time")
    spied = _DelayedSolves(solve)
    results = {}
    for workers in (1, 2):
        spied.peak = 0
        results[workers] = search(service.problem_from_request(_MIXTRAL_32),
                                  policy=SearchPolicy(solve_workers=workers), seams=Seams(solve=spied))
        assert spied.peak == workers, f"{workers} worker(s): {spied.peak} solves ran at once"
    one, two = results[1], results[2]
    assert two.status == one.status == "optimal"
    assert two.best[0].config == one.best[0].config
    assert two.best[0].estimate.prediction.step_time_s == one.best[0].estimate.prediction.step_time_s
    assert two.stats.deferred >= 2 and two.stats.ilp_solves >= 2


def test_best_first_loop_goes_on_while_a_solve_runs():
    """The best-first loop hands its CP-SAT solves to a thread and goes on bounding the queue:
    with each solve delayed by 50 ms, degree groups were expanded (their candidates
    enumerated) while a solve was running, and the search proves the same optimum as without
    the delay."""

    from planner.ilp import solve as real_solve
    from planner.search import Seams, search
    from planner.space import group_candidates as real_candidates

    spied, overlapped = _DelayedSolves(real_solve), [0]

    def spied_candidates(*args, **kwargs):
        with spied.lock:
            overlapped[0] += spied.active > 0
        return real_candidates(*args, **kwargs)

    prob = service.problem_from_request(_MIXTRAL_32)
    res = search(prob, seams=Seams(solve=spied, group_candidates=spied_candidates))
    assert overlapped[0] > 0, "no degree group was expanded while a solve ran"
    undelayed = search(prob, seams=Seams(group_candidates=spied_candidates))
    assert res.status == undelayed.status == "optimal"
    # proven optima of the same candidates (test_exhaustive_equivalence checks them against
    # brute force)
    assert res.best[0].estimate.prediction.step_time_s == pytest.approx(
        undelayed.best[0].estimate.prediction.step_time_s, rel=1e-12)


def test_candidates_without_a_hint_do_not_wait_for_a_running_solve():
    """A candidate with no greedy partition that reaches the front while the loop's solve
    slot is taken is deferred to a retry (once a plan is found) rather than waited for:
    with no hints at all and each solve delayed by 50 ms, candidates are deferred, and the
    search proves the optimum of the hinted search."""

    from planner.ilp import solve
    from planner.search import Seams, search

    prob = service.problem_from_request(_MIXTRAL_32)
    hinted = search(prob)
    res = search(prob, seams=Seams(solve=_DelayedSolves(solve), best_hint=lambda p, deadline: None))
    assert res.stats.deferred > 0, "no candidate without a hint was deferred"
    assert res.status == hinted.status == "optimal"
    assert res.best[0].estimate.prediction.step_time_s == pytest.approx(
        hinted.best[0].estimate.prediction.step_time_s, rel=1e-12)


def test_staged_retries_still_prove_the_optimum():
    """At gap 0 the search first runs as at SearchPolicy.staged_gap (its solves capped 1% below the
    best plan: short solves that close the gap to 1%), then at gap 0, where a candidate that
    the first phase's cap cut off is solved again at the best plan's cap: with the first
    capped solve of every candidate cut (simulated: "unknown" at its own bound), the search
    still proves the optimum of the uncut search, after staged solves."""
    from planner.ilp import StageSolution
    from planner.ilp import solve as real
    from planner.search import Seams, search

    prob = service.problem_from_request(_MIXTRAL_32)
    plain = search(prob)
    tried, stops = set(), []

    def first_capped_solve_cut(p, t, hint=None, seed=0, lower_bound_s=None, stop_at_s=None, handle=None):
        key = (id(p.table), p.pp, p.vpp, p.recompute, p.schedule)
        if stop_at_s is not None and key not in tried:
            tried.add(key)
            return StageSolution((), (), "unknown", lower_bound_s or 0.0, 0.0)
        stops.append(stop_at_s)
        return real(p, t, hint, seed=seed, lower_bound_s=lower_bound_s, stop_at_s=stop_at_s, handle=handle)

    res = search(prob, seams=Seams(solve=first_capped_solve_cut))
    best_s = res.best[0].estimate.prediction.step_time_s
    assert res.status == plain.status == "optimal"
    assert best_s == pytest.approx(plain.best[0].estimate.prediction.step_time_s, rel=1e-12)
    # the best plan only falls: a cap below the final one is a staged cap
    assert any(s is not None and s < best_s * (1 - 1e-9) for s in stops), "no staged solve"


def test_solve_time_is_the_whole_search():
    """solve_time_s is the search's wall time (enumeration, bounds and CP-SAT), inside the
    request's own wall time; ilp_time_s is the CP-SAT part of it."""
    from .test_progress import request as progress_request

    # SMALL is proven by its bounds alone (no CP-SAT call); this one needs a solve
    t0 = time.perf_counter()
    s = service.plan(progress_request(8, 24))["search"]
    wall = time.perf_counter() - t0
    assert s["ilp_solves"] >= 1
    assert 0 < s["ilp_time_s"] < s["solve_time_s"] <= wall
    # the best plan alone (top_k 1): the runners-up of a larger top-k are solved after its proof
    small = service.plan({**json.loads(json.dumps(SMALL)), "search": {"top_k": 1}})["search"]
    assert small["ilp_solves"] == 0 and small["ilp_time_s"] == 0.0 < small["solve_time_s"]


def test_small_plan_is_optimal(small_plan):
    assert small_plan["status"] == "optimal"
    assert small_plan["search"]["gap"] == 0
    assert small_plan["fits"]


# --------------------------------------------------------------------------- time limit


def test_time_limit_returns_feasible_with_gap():
    # 1 s: at 0.5 s the group bounds' share (SearchPolicy.enumeration_share, 0.3 s) is close
    # enough to their 0.07 s that a pause of the test process leaves groups unbounded, and the
    # gap is then honestly 1 (no lower bound)
    req = with_search(LARGE, time_limit_s=1.0)
    t0 = time.perf_counter()
    plan = service.plan(req)
    wall = time.perf_counter() - t0
    assert wall < 3.5, f"1 s limit took {wall:.2f} s"
    assert plan["status"] == "feasible"
    assert isinstance(plan["search"]["gap"], float) and 0 <= plan["search"]["gap"] < 1
    assert plan["search"]["timed_out"]
    assert any("time limit" in r for r in plan["reasons"])


def test_time_limit_large_moe_returns_a_plan():
    t0 = time.perf_counter()
    plan = service.plan(with_search(LARGE_MOE, time_limit_s=0.5))
    # the search's own clock stops near its limit; the wall time also holds the request's
    # parsing and the plan's assembly, slower while other work shares the 2 cores
    assert plan["search"]["solve_time_s"] < 2.0
    assert time.perf_counter() - t0 < 6.0
    assert plan["status"] == "feasible" and plan["fits"]


def test_time_limit_argument_overrides():
    t0 = time.perf_counter()
    plan = service.plan(LARGE, time_limit_s=0.5)
    assert time.perf_counter() - t0 < 3.0
    assert plan["status"] in ("feasible", "optimal")


def test_gap_limit_bounds_the_plan_by_the_exact_optimum():
    """search.gap_limit g stops once every unsearched bound is >= (1 - g) x the best plan: the
    plan is within g of the exact search's optimum, never below it, and the reported gap is
    a true one (the optimum is >= (1 - gap) x the plan)."""
    req = {"model": {"name": "llama3-70b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 64},
           "training": {"global_batch_size": 128, "seq_length": 8192}}
    exact = service.plan(with_search(req, time_limit_s=60))
    assert exact["status"] == "optimal"
    t_opt = exact["prediction"]["step_time_s"]
    g = 0.02
    loose = service.plan(with_search(req, time_limit_s=60, gap_limit=g))
    t, gap = loose["prediction"]["step_time_s"], loose["search"]["gap"]
    assert not loose["search"]["timed_out"]
    assert 0 <= gap <= g + 1e-12
    assert t_opt * (1 - 1e-9) <= t <= t_opt / (1 - g)
    assert t * (1 - gap) <= t_opt * (1 + 1e-9)
    # less work for it (counted, not timed: two wall-clock runs of under a second each swap
    # order on a loaded 2-core machine): the exact search proves with CP-SAT solves the
    # gap limit lets it skip
    assert loose["search"]["ilp_solves"] < exact["search"]["ilp_solves"]
    if gap > 0:
        assert any(r.startswith("gap limit reached") for r in loose["reasons"])


# --------------------------------------------------------------------------- infeasible


def test_infeasible_explains_with_numbers():
    with pytest.raises(Infeasible) as ei:
        service.plan(INFEASIBLE)
    d = ei.value.details
    assert d["least_memory_gib"] > d["capacity_gib"]
    assert d["capacity_gib"] == pytest.approx(39.4, abs=0.1)
    assert d["suggestions"] and all(isinstance(s, str) for s in d["suggestions"])
    assert "GiB" in ei.value.message


def test_infeasible_suggestions_apply_to_the_request():
    """Nothing the search already tried is suggested: with ZeRO, recompute and CP open, none of
    them is; pinned out where they can act, each is (ZeRO-3 over dp x cp > 1, full recompute,
    CP taking ranks from the least-memory layout's data-parallel ones)."""
    with pytest.raises(Infeasible) as ei:
        service.plan(INFEASIBLE)
    tips = " | ".join(ei.value.details["suggestions"])
    assert "ZeRO" not in tips and "recomputation" not in tips and "context parallelism" not in tips
    assert "more GPUs" in tips
    req = {**INFEASIBLE, "search": {"zero": [0, 1], "recompute": ["none"], "cp": [1], "micro_batch_size": [2]}}
    with pytest.raises(Infeasible) as ei:
        service.plan(req)
    tips = ei.value.details["suggestions"]
    assert any(t.startswith("ZeRO-3 (search.zero: [3])") for t in tips)
    assert any(t.startswith("full activation recomputation") for t in tips)
    assert "a micro-batch of 1 (search.micro_batch_size: [1])" in tips
    least = ei.value.details["least_memory_config"]
    cp = [t for t in tips if t.startswith("context parallelism")]
    assert bool(cp) == (least["dp"] > 1), (least, cp)


def test_infeasible_at_one_data_parallel_rank_offers_no_zero_or_cp():
    """ZeRO shards over the dp x cp ranks: with dp and cp pinned to 1 it does nothing, and CP
    would take model-parallel ranks, so neither is suggested; a GPU too small to hold the least
    any candidate needs is not either."""
    req = {"model": {"name": "llama3-70b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 32, "seq_length": 2048},
           "search": {"dp": [1], "cp": [1], "zero": [0], "time_limit_s": 30}}
    with pytest.raises(Infeasible) as ei:
        service.plan(req)
    d = ei.value.details
    tips = " | ".join(d["suggestions"])
    assert d["binding"] == "memory per GPU"
    assert "ZeRO" not in tips and "context parallelism" not in tips
    from cost_model.hardware.catalog import CATALOG

    named = [g for g in CATALOG if f" {g} (" in tips]
    assert named and all(CATALOG[g].memory_gib * (1 - d["memory_headroom"]) >= d["least_memory_gib"] for g in named)


@pytest.mark.parametrize("search,rule", [
    ({"tp": 3}, "search.tp: 16 attention heads are not divisible by tp=3"),
    ({"tp": [3, 5]}, "search.tp: 16 attention heads are not divisible by tp=3; 16 attention heads are not "
                     "divisible by tp=5"),
    ({"tp": 16, "tp_within_node": True}, "search.tp: 8 KV heads are not divisible by tp=16"),
    ({"dp": 3}, "search.dp: global_batch_size 32 is not divisible by dp=3"),
    ({"cp": 3}, "search.cp: seq_length 2048 is not divisible by cp=3"),
    ({"cp": 2048}, "search.cp: each CP rank needs an even share of the sequence (2048/2048)"),
    ({"pp": 16}, "search.pp: pp=16 exceeds the model's 8 layers"),
    ({"micro_batch_size": 5}, "search.micro_batch_size: global_batch_size 32 is not divisible by micro_batch_size=5"),
    ({"ep": 2}, "search.ep: ep=2 needs an MoE model"),
    ({"tp": 8, "pp": 4}, "tp x pp = 8 x 4 = 32 does not divide the cluster's 16 GPUs"),
    ({"tp": 2, "pp": 2, "cp": 1, "dp": 2}, "tp x cp x pp x dp = 2 x 1 x 2 x 2 = 8 leaves 8 of the cluster's 16 GPUs idle"),
    ({"tp": 1, "pp": 1, "cp": 1}, "tp x cp x pp = 1 x 1 x 1 = 1 leaves dp = 16 / 1 = 16, and global_batch_size 8 is "
                                  "not divisible by it"),
])
def test_infeasible_pin_names_the_rule_it_breaks(search, rule):
    """A pinned degree no candidate can take: the model's, the cluster's or the batch's rule,
    with the numbers (the estimate's sentence where it has one), not the engine's rules."""
    req = with_search(SMALL, **search)
    if "dp = 16" in rule:
        req["training"] = {**req["training"], "global_batch_size": 8}
    with pytest.raises(Infeasible) as ei:
        service.plan(req)
    msg = ei.value.message
    assert msg.startswith("no configuration satisfies the divisibility rules and the search restrictions: " + rule), msg
    assert "megatron cannot" not in msg and "schedule" not in msg
    assert ei.value.details["binding"] == "search space" and ei.value.details["suggestions"]


def test_infeasible_pin_suggests_the_values_that_pass():
    with pytest.raises(Infeasible) as ei:
        service.plan(with_search(SMALL, tp=3))
    assert ei.value.details["suggestions"] == ["search.tp: one of [1, 2, 4, 8]"]
    assert ei.value.details["pinned_rules"] == ["search.tp: 16 attention heads are not divisible by tp=3"]


def test_pinned_chunks_beyond_the_blocks_plan_empty_ends():
    """Llama 3.1 405B (126 blocks) pinned to pp16 x vpp8 = 128 chunks, Megatron-Bridge's
    layout that counts the embedding and the loss as pipeline layers: the plan puts one block
    on every chunk but the first (the embedding alone) and the last (the loss alone), prices
    it as `planner estimate` does, and launches it with megatron-core's layout string."""
    req = {"model": {"name": "llama3-405b"}, "cluster": {"gpu": "gb200", "num_gpus": 256},
           "training": {"global_batch_size": 1536, "seq_length": 8192},
           "search": {"tp": 4, "pp": 16, "vpp": 8, "cp": 1, "targets": ["megatron"]}}
    p = service.plan(req)
    assert p.parallelism.stage_layers == (0, *[1] * 126, 0)
    assert p.stages[0].layers == (0, -1) and p.stages[-1].layers == (126, 125)
    par = json.loads(p.model_dump_json())["parallelism"]  # the plan's block, pasted unchanged
    est = service.estimate({**{k: req[k] for k in ("model", "cluster", "training")}, "parallelism": par})
    assert est.prediction.step_time_s == pytest.approx(p.prediction.step_time_s, rel=1e-12)
    args = p.launch["megatron"]["args"]
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    assert layout.split("|") == ["E"] + ["t"] * 126 + ["L"]


def test_infeasible_names_the_pinned_chunk_count():
    """Beyond blocks + 2 chunks no layout is searched: the message says why."""
    req = {"model": {"name": "llama3-405b"}, "cluster": {"gpu": "gb200", "num_gpus": 256},
           "training": {"global_batch_size": 1536, "seq_length": 8192},
           "search": {"tp": 4, "pp": 16, "vpp": 9, "targets": []}}
    with pytest.raises(Infeasible) as ei:
        service.plan(req)
    assert "16 x 9 = 144 model chunks for 126 blocks" in ei.value.message and "at most 128" in ei.value.message
    assert ei.value.details["binding"] == "search space"


def test_infeasible_cli_exit_1(tmp_path):
    p = tmp_path / "req.json"
    p.write_text(json.dumps(INFEASIBLE))
    r = cli("plan", "--request", str(p), "--json")
    assert r.returncode == 1, r.stderr
    assert "infeasible" in r.stderr
    body = json.loads(r.stdout)
    assert body["error"]["code"] == "infeasible"
    r = cli("plan", "--model", "gpt3-175b", "--gpu", "a100-40gb", "--gpus", "8", "--global-batch", "64", "--seq-len", "2048")
    assert r.returncode == 1


# --------------------------------------------------------------------------- pins


@pytest.mark.parametrize("pin,allowed", [({"tp": 2}, {2}), ({"tp": [2, 4]}, {2, 4}), ({"pp": 2}, {2}),
                                         ({"micro_batch_size": [1]}, {1}), ({"zero": 3}, {3})])
def test_pins_are_respected(pin, allowed):
    plan = service.plan(with_search(SMALL, **pin))
    (knob,) = pin
    assert plan["parallelism"][knob] in allowed
    for alt in plan["alternatives"]:
        assert alt["parallelism"][knob] in allowed


def test_pin_recompute_and_schedule():
    plan = service.plan(with_search(SMALL, pp=2, schedule="interleaved", recompute="full"))
    par = plan["parallelism"]
    assert par["pp"] == 2 and par["schedule"] == "interleaved" and par["vpp"] > 1
    # full recompute of zero blocks normalises to "none"; either is a full-recompute plan
    assert par["recompute"] in ("full", "none")


def test_pinned_plan_never_faster_than_open(small_plan):
    pinned = service.plan(with_search(SMALL, tp=8, pp=2))
    assert pinned["prediction"]["step_time_s"] >= small_plan["prediction"]["step_time_s"] * (1 - 1e-9)


def test_use_all_gpus_false():
    req = with_search({**SMALL, "cluster": {"gpu": "a100-80gb", "num_gpus": 12, "gpus_per_node": 4}}, use_all_gpus=False)
    plan = service.plan(req)
    par = plan["parallelism"]
    assert par["dp"] * par["tp"] * par["pp"] * par["cp"] <= 12
    assert plan["fits"]
    # with all GPUs forced the plan can only be as fast or slower (the space is a subset)
    try:
        forced = service.plan({**SMALL, "cluster": {"gpu": "a100-80gb", "num_gpus": 12, "gpus_per_node": 4}})
    except Infeasible:
        return
    assert plan["prediction"]["step_time_s"] <= forced["prediction"]["step_time_s"] * (1 + 1e-9)


@pytest.mark.parametrize("knob,value", [
    ("tp", "two"), ("tp", [2, "x"]), ("pp", -1), ("tp", True), ("tp", []), ("recompute", "some"),
    ("schedule", "zigzag"), ("zero", 4), ("sequence_parallel", "yes"), ("memory_headroom", 1.5),
    ("top_k", 0), ("time_limit_s", 0), ("time_limit_s", "fast"), ("targets", ["nemo"]),
    ("use_all_gpus", "no"), ("gap_limit", -0.01), ("gap_limit", 0.6), ("gap_limit", "1%"),
])
def test_bad_search_value_names_the_knob(knob, value):
    with pytest.raises(SpecError) as ei:
        service.plan(with_search(SMALL, **{knob: value}))
    assert f"search.{knob}" in str(ei.value)


def test_bad_search_value_cli_exit_2(small_request_file):
    req = with_search(SMALL, recompute="some")
    p = small_request_file.parent / "bad.json"
    p.write_text(json.dumps(req))
    r = cli("plan", "--request", str(p))
    assert r.returncode == 2
    assert "search.recompute" in r.stderr


# --------------------------------------------------------------------------- check


def _check_req(par: dict) -> dict:
    keep = {k: par[k] for k in ("dp", "tp", "pp", "cp", "ep", "vpp", "sequence_parallel", "zero", "dp_replicate",
                                "micro_batch_size", "recompute", "schedule")}
    return {**SMALL, "parallelism": keep}


def test_check_best_plan_ok(small_plan):
    res = service.check(_check_req(small_plan["parallelism"]))
    assert res["fits"]
    # the balanced split / all-block recompute may be a little slower than the planned one
    assert res["ok"], res["reasons"]
    assert res["slowdown"] <= 0.10


def test_check_poor_config_slowdown(small_plan):
    poor = dict(small_plan["parallelism"], dp=1, dp_replicate=1, tp=2, pp=8, vpp=1, schedule="1f1b", zero=0,
                micro_batch_size=1, recompute="full", sequence_parallel=True)
    res = service.check(_check_req(poor))
    assert res["fits"]
    assert not res["ok"]
    assert res["slowdown"] > 0.10
    assert any("slower than the best plan" in r for r in res["reasons"])


def test_check_not_fitting():
    par = {"dp": 16, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "sequence_parallel": False, "zero": 0,
           "micro_batch_size": 2, "recompute": "none", "schedule": "1f1b"}
    big = {**SMALL, "model": {"transformer": {**SMALL["model"]["transformer"], "hidden_size": 6144,
                                              "num_attention_heads": 48, "ffn_hidden_size": 16384,
                                              "num_kv_heads": 8}}}
    res = service.check({**big, "parallelism": par})
    assert not res["fits"] and not res["ok"]
    assert any("does not fit" in r for r in res["reasons"])


def test_check_cli_exit_codes(small_plan, small_request_file):
    par = small_plan["parallelism"]
    flags = ["--dp", str(par["dp"]), "--tp", str(par["tp"]), "--pp", str(par["pp"]), "--cp", str(par["cp"]),
             "--micro-batch", str(par["micro_batch_size"]), "--zero", str(par["zero"]), "--recompute", par["recompute"],
             "--dp-replicate", str(par["dp_replicate"])]
    if par["vpp"] > 1:
        flags += ["--vpp", str(par["vpp"]), "--schedule", par["schedule"]]
    if par["sequence_parallel"]:
        flags.append("--sequence-parallel")
    r = cli("check", "--request", str(small_request_file), *flags)
    assert r.returncode == 0, r.stdout + r.stderr
    poor = ["--dp", "1", "--tp", "2", "--pp", "8", "--micro-batch", "1", "--recompute", "full"]
    r = cli("check", "--request", str(small_request_file), *poor)
    assert r.returncode == 1, r.stdout + r.stderr
    r = cli("check", "--request", str(small_request_file), *poor, "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False


# --------------------------------------------------------------------------- CLI plan


def test_cli_plan_json_fields(small_request_file, tmp_path):
    r = cli("plan", "--request", str(small_request_file), "--json", "--emit", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    for k in PLAN_KEYS:
        assert k in plan, k
    assert plan["status"] in ("optimal", "feasible")
    for k in PAR_KEYS:
        assert k in plan["parallelism"], k
    par = plan["parallelism"]
    assert par["dp"] * par["tp"] * par["pp"] * par["cp"] == 16
    assert len(plan["stages"]) == par["pp"] * par["vpp"]
    covered = []
    for i, s in enumerate(plan["stages"]):
        assert set(("index", "layers", "recompute_layers", "memory_gib", "time_ms")) <= set(s)
        assert s["index"] == i
        covered += list(range(s["layers"][0], s["layers"][1] + 1))
    assert covered == list(range(8))
    for k in PRED_KEYS:
        assert k in plan["prediction"], k
    for k in LAUNCH_KEYS:
        # an artifact, or the reason its engine cannot run this plan
        assert k in plan["launch"] or k in plan["launch"].get("skipped", {}), k
    assert plan["ranks"]["order"] == "tp-cp-ep-dp-pp"
    for k in SEARCH_KEYS:
        assert k in plan["search"], k
    assert plan["search"]["solver"] == "cp-sat"
    for a in plan["alternatives"]:
        assert set(("parallelism", "prediction", "reason")) <= set(a)
        assert a["prediction"]["step_time_s"] >= plan["prediction"]["step_time_s"] * (1 - 1e-9)
    assert plan["reasons"] and all(isinstance(x, str) for x in plan["reasons"])
    # --emit
    out = tmp_path / "out"
    emitted = json.loads((out / "plan.json").read_text())
    assert emitted["id"] == plan["id"]
    assert emitted["parallelism"] == plan["parallelism"]
    assert len([p for p in out.rglob("*") if p.is_file()]) > 1


def test_cli_plan_exhaustive_small(small_request_file):
    r = cli("plan", "--request", str(small_request_file), "--json", "--exhaustive")
    assert r.returncode == 0, r.stderr
    ref = json.loads(r.stdout)
    assert ref["search"]["solver"] == "exhaustive"
    got = service.plan(SMALL)
    assert math.isclose(ref["prediction"]["step_time_s"], got["prediction"]["step_time_s"], rel_tol=1e-5)


# --------------------------------------------------------------------------- consistency


@pytest.mark.parametrize("req", [
    SMALL,
    with_search(SMALL, pp=4, recompute="full", micro_batch_size=4),
    with_search(SMALL, pp=2, schedule="interleaved"),
    {"model": {"name": "llama3-70b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 64},
     "training": {"global_batch_size": 128, "seq_length": 8192}, "search": {"time_limit_s": 5}},
    {"model": {"transformer": {"num_layers": 6, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 32000,
                               "mlp": "swiglu", "moe": {"num_experts": 4, "top_k": 2, "ffn_hidden_size": 2048, "layer_freq": 2}}},
     "cluster": {"gpu": "a100-40gb", "num_gpus": 8}, "training": {"global_batch_size": 16, "seq_length": 1024}},
], ids=["small", "pp4-full", "interleaved", "llama3-70b", "moe-freq2"])
def test_plan_time_equals_estimate_of_its_config(req):
    plan = service.plan(req)
    par = dict(plan["parallelism"])
    par.pop("num_micro_batches")
    est = estimate(parse_model(req["model"]), parse_cluster(req["cluster"]), parse_training(req["training"]),
                   parse_parallelism(par))
    assert est.fits
    assert math.isclose(est.prediction.step_time_s, plan["prediction"]["step_time_s"], rel_tol=1e-9)
    assert math.isclose(est.prediction.memory.peak_gib, plan["prediction"]["memory"]["peak_gib"], rel_tol=1e-9)
    for alt in plan["alternatives"]:
        apar = dict(alt["parallelism"])
        apar.pop("num_micro_batches")
        aest = estimate(parse_model(req["model"]), parse_cluster(req["cluster"]), parse_training(req["training"]),
                        parse_parallelism(apar))
        assert math.isclose(aest.prediction.step_time_s, alt["prediction"]["step_time_s"], rel_tol=1e-9)


@pytest.mark.parametrize("slow", ["reduce_scatter", "all_reduce"])
def test_measured_collectives_decide_zero_and_sp(slow):
    """With a profile that fits each collective on its own, ZeRO-1/2 (reduce-scatter +
    all-gather) no longer dominates ZeRO-0 (all-reduce), nor SP (all-gather +
    reduce-scatter) no-SP: the planner keeps both and matches the brute force, which keeps
    every option. A 20x slower collective decides which one wins."""
    from cost_model.specs.inputs import CalibrationProfile, CommFit

    fast, slower = CommFit(1e-5, 1e-11), CommFit(2e-4, 2e-10)
    fits = {(c, lvl): (slower if c == slow else fast)
            for c in ("all_reduce", "reduce_scatter", "all_gather") for lvl in ("intra", "inter")}
    prof = CalibrationProfile(device="a100-40gb", comm=fits)
    req = {
        "model": {"transformer": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
                                  "vocab_size": 32000}},
        "cluster": {"gpu": "a100-40gb", "num_gpus": 4},
        "training": {"global_batch_size": 8, "seq_length": 1024},
        "search": {"pp": 1, "cp": 1, "targets": []},
    }
    best = service.plan(req, prof)
    ref = service.plan(req, prof, exhaustive=True)
    assert math.isclose(best["prediction"]["step_time_s"], ref["prediction"]["step_time_s"], rel_tol=1e-6)
    par = best["parallelism"]
    if slow == "reduce_scatter":  # the all-reduce paths win: plain DP, TP without SP
        assert par["zero"] == 0 or par["dp"] == 1
        assert not par["sequence_parallel"] or par["tp"] == 1
    else:  # all-reduce is the slow one: ZeRO-1/2 and SP take over
        assert par["zero"] in (1, 2, 3) or par["dp"] == 1
        assert par["sequence_parallel"] or par["tp"] == 1
    assert par["dp"] > 1 or par["tp"] > 1
