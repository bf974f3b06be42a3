"""The CP-SAT planner reaches the brute-force optimum (DESIGN.md "Solver rules").

A seeded random draw of small instances (<= 32 GPUs, <= 24 layers): GPT- and Llama-style
transformers, MoE (layer_freq 1 or 2: the non-uniform CP-SAT model), generic `layers`
models with varied per-layer numbers (also non-uniform), on a100-40gb / a100-80gb / cpu
with sizes that make memory bind (recompute, pp, ZeRO matter). Every knob is open except
the pins that keep the brute force within its size limit (vpp / pp for the deepest models).
For each: `service.plan(req)` and `service.plan(req, exhaustive=True)` give the same step
time (rel 1e-5), or both raise Infeasible.
"""

from __future__ import annotations

import math
import random

from cost_model.specs.errors import SpecError
from planner import service
from planner.service import Infeasible

SEED = 20240607
MIN_COMPARED = 50
MAX_DRAWS = 240
REL = 1e-5


def draw_request(rng: random.Random) -> dict:
    gpus = rng.choice([1, 2, 2, 4, 4, 8, 8, 16, 32])
    gpu = rng.choice(["a100-40gb", "a100-40gb", "a100-80gb", "cpu"])
    kind = rng.choices(["gpt", "llama", "moe", "layers"], [3, 3, 2, 3])[0]
    if kind == "layers":
        L = rng.choice([2, 3, 4, 5, 6, 8, 10])
    else:
        L = rng.choice([2, 3, 4, 4, 5, 6, 6, 8, 8, 12, 16, 24])
    hidden = rng.choice([512, 1024, 2048] if gpu == "cpu" else [1024, 2048, 4096, 6144, 8192])
    heads = rng.choice([8, 16, 32])
    tf: dict = {"num_layers": L, "hidden_size": hidden, "num_attention_heads": heads,
                "vocab_size": rng.choice([32000, 51200])}
    if kind in ("llama", "moe"):
        kv = [k for k in (heads, heads // 2, heads // 4, 8) if k >= 1 and heads % k == 0]
        tf.update(mlp="swiglu", num_kv_heads=rng.choice(kv), ffn_hidden_size=hidden * 8 // 3 // 64 * 64)
    else:
        tf["tie_embeddings"] = rng.random() < 0.5
    if kind == "moe":
        e = rng.choice([2, 4])
        tf["moe"] = {"num_experts": e, "top_k": min(e, rng.choice([1, 2])), "ffn_hidden_size": hidden * 2,
                     "layer_freq": rng.choice([1, 2])}
    if kind == "layers":
        scale = 0.1 if gpu == "cpu" else 1.0
        layers = []
        for i in range(L):
            p = math.exp(rng.uniform(math.log(2e7), math.log(2e9))) * scale
            layers.append({
                "name": f"l{i}",
                "fwd_flops": 2 * p * 2048 * rng.uniform(0.5, 2.0),
                "params": p,
                "activation_bytes": rng.uniform(0.5, 16.0) * 2**30 * scale,
                "output_bytes": rng.uniform(1, 32) * 2**20,
            })
        model = {"layers": layers}
    else:
        model = {"transformer": tf}
    search: dict = {"time_limit_s": 60}
    # pins that keep the brute force under its size limit (exhaustive.check_size)
    if L > 8:
        search["vpp"] = [1, 2]
    if 12 < L <= 16:
        search["pp"] = [1, 2, 4]
    if L > 16:
        search["pp"], search["vpp"] = [1, 2], 1
    return {
        "model": model,
        "cluster": {"gpu": gpu, "num_gpus": gpus},
        "training": {"global_batch_size": rng.choice([4, 8, 16, 32, 64]),
                     "seq_length": rng.choice([128, 256, 512, 1024, 2048]),
                     # eager attention stores the s x s scores: selective recompute matters
                     "attention": "eager" if rng.random() < 0.35 else "flash"},
        "search": search,
    }


def _solve(req: dict, exhaustive: bool):
    try:
        return service.plan(req, exhaustive=exhaustive)
    except Infeasible:
        return None


def test_planner_matches_brute_force():
    rng = random.Random(SEED)
    compared = infeasible = too_big = 0
    mismatches = []
    features = {"pp>1": 0, "recompute": 0, "zero": 0, "vpp>1": 0, "moe": 0, "layers": 0}
    for i in range(MAX_DRAWS):
        if compared >= MIN_COMPARED + 10:
            break
        req = draw_request(rng)
        try:
            ref = _solve(req, exhaustive=True)
        except SpecError:
            too_big += 1  # the brute force refuses it: not a comparison
            continue
        got = _solve(req, exhaustive=False)
        if ref is None or got is None:
            if ref is None and got is None:
                infeasible += 1
            else:
                mismatches.append((i, "only one is infeasible", got and got["prediction"]["step_time_s"],
                                   ref and ref["prediction"]["step_time_s"], req))
            continue
        assert not ref["search"]["timed_out"], f"draw {i}: the brute force ran out of time; shrink the draw"
        t_ref, t_got = ref["prediction"]["step_time_s"], got["prediction"]["step_time_s"]
        if not math.isclose(t_got, t_ref, rel_tol=REL):
            mismatches.append((i, "step time", t_got, t_ref, req))
        if not got["search"]["timed_out"]:
            assert got["status"] == "optimal", f"draw {i}: status {got['status']} without a time-out"
        compared += 1
        par = got["parallelism"]
        features["pp>1"] += par["pp"] > 1
        features["recompute"] += par["recompute"] != "none"
        features["zero"] += par["zero"] > 0
        features["vpp>1"] += par["vpp"] > 1
        features["moe"] += "moe" in req["model"].get("transformer", {})
        features["layers"] += "layers" in req["model"]
    print(f"compared {compared}, both infeasible {infeasible}, too big for brute force {too_big}, features {features}")
    assert not mismatches, "planner != brute force:\n" + "\n".join(map(repr, mismatches))
    assert compared >= MIN_COMPARED
    # the draw exercises the interesting parts of the space
    assert features["pp>1"] and features["recompute"] and features["zero"] and features["moe"] and features["layers"]


def test_runtime_and_deepspeed_plans_match_brute_force():
    """The same on engines whose optimizer step holds its own buffers (the runtime's flat fp32
    copy, DeepSpeed's fp32 gradient partition: a memory row of its own in the float model and
    the ILP): a smaller draw, each request on one of the two engines."""
    rng = random.Random(SEED + 1)
    compared, mismatches = 0, []
    for _ in range(MAX_DRAWS):
        if compared >= 10:
            break
        req = {**draw_request(rng), "engine": rng.choice(["runtime", "deepspeed"])}
        try:
            ref = _solve(req, exhaustive=True)
        except SpecError:
            continue
        got = _solve(req, exhaustive=False)
        if ref is None or got is None:
            if (ref is None) != (got is None):
                mismatches.append(("only one is infeasible", req))
            continue
        compared += 1
        t_ref, t_got = ref["prediction"]["step_time_s"], got["prediction"]["step_time_s"]
        if not math.isclose(t_got, t_ref, rel_tol=REL):
            mismatches.append((t_got, t_ref, req))
    assert compared >= 10
    assert not mismatches, mismatches
