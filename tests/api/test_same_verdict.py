"""The CLI and the REST service accept and refuse the same inputs, naming the same field
(one request schema). Each case goes to a live uvicorn process and to
`python -m api.cli` in a subprocess (as `--request FILE`, and a few as flags); the verdicts
(HTTP 422 / exit 2, or accepted) and the field paths must agree."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.request.schema import MAX_LAYERS, REQUESTS

REPO = Path(__file__).resolve().parents[2]

# a model small enough that every accepted case answers in well under a second
TINY = {"transformer": {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "vocab_size": 1024}}
BASE = {
    "model": {"name": "llama3-8b"},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "training": {"global_batch_size": 32, "seq_length": 2048},
}
PAR = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1}
ROUTES = {"estimate": "/v1/estimate", "check": "/v1/check", "plan": "/v1/plans"}


def _with(path: str, value, base: dict) -> dict:
    """`base` with the dotted `path` set to `value` (the key removed when value is ...)."""
    req = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    d = req
    for k in parents:
        d = d.setdefault(k, {})
    if value is ...:
        d.pop(leaf, None)
    else:
        d[leaf] = value
    return req


EST = {**BASE, "parallelism": PAR}
TINY_EST = {**EST, "model": TINY}

# (command, request, the field a refusal names; None = accepted)
CASES = [
    ("estimate", EST, None),
    ("estimate", _with("model.transformer.num_layers", 0, TINY_EST), "model.transformer.num_layers"),
    ("estimate", _with("model.transformer.num_layers", MAX_LAYERS + 1, TINY_EST), "model.transformer.num_layers"),
    ("estimate", _with("model.transformer.num_layers", MAX_LAYERS, TINY_EST), None),  # the boundary itself
    ("estimate", _with("model.transformer.num_layers", "four", TINY_EST), "model.transformer.num_layers"),
    ("estimate", _with("model.transformer.moe", {"num_experts": 8, "top_k": 0, "ffn_hidden_size": 512}, TINY_EST),
     "model.transformer.moe.top_k"),
    ("estimate", _with("model.transformer.moe", {"num_experts": 8, "top_k": 9, "ffn_hidden_size": 512}, TINY_EST),
     "model.transformer.moe.top_k"),
    ("estimate", _with("model.transformer.rotary", True, TINY_EST), "model.transformer.rotary"),
    ("estimate", _with("surprise", 1, EST), "surprise"),
    ("estimate", _with("metadata", {"team": "x"}, EST), None),
    ("estimate", _with("model", {"layers": []}, EST), "model.layers"),
    ("estimate", _with("model", {"name": "llama3-8b", "transformer": TINY["transformer"]}, EST), None),
    ("estimate", _with("model", {"transformer": TINY["transformer"], "layers": [
        {"fwd_flops": 1, "params": 1, "activation_bytes": 1, "output_bytes": 1}]}, EST), "model"),
    ("estimate", _with("model.name", "gpt-5", EST), "model.name"),
    ("estimate", _with("cluster.gpu", "tpu-v5", EST), "cluster.gpu"),
    ("estimate", _with("cluster.gpu", {"base": "a100-80gb", "memory_gib": 40.0}, EST), None),
    ("estimate", _with("cluster.gpu", {"memory_gib": 40.0}, EST), "cluster.gpu.hbm_gb_s"),
    ("estimate", _with("cluster.gpu", {"base": "a100-80gb", "memory_gib": -1}, EST), "cluster.gpu.memory_gib"),
    ("estimate", _with("cluster.num_gpus", "8", EST), "cluster.num_gpus"),
    ("estimate", _with("cluster.nvlink_domain", 0, EST), "cluster.nvlink_domain"),
    ("estimate", _with("training.dtype", "int4", EST), "training.dtype"),
    ("estimate", _with("training.global_batch_size", -32, EST), "training.global_batch_size"),
    ("estimate", _with("training.seq_length", ..., EST), "training.seq_length"),
    ("estimate", _with("parallelism", {"tp": 3, "dp": 1}, EST), "parallelism.tp"),  # 32 heads not divisible by 3
    ("estimate", _with("parallelism.tp", 2.0, EST), "parallelism.tp"),
    ("estimate", _with("parallelism.recompute", "most", EST), "parallelism.recompute"),
    ("estimate", _with("parallelism.zero", 4, EST), "parallelism.zero"),
    ("estimate", _with("parallelism.etp", 0, EST), "parallelism.etp"),
    ("estimate", _with("parallelism.stage_layers", [-1, 33], EST), "parallelism.stage_layers[0]"),
    ("estimate", _with("parallelism", ..., EST), "parallelism"),
    ("check", _with("max_slowdown", -1, EST), "max_slowdown"),
    ("plan", _with("search", {"top_k": 0}, BASE), "search.top_k"),
    ("plan", _with("search", {"tp": [2, 0]}, BASE), "search.tp[1]"),
    ("plan", _with("search", {"recompute": ["none", "most"]}, BASE), "search.recompute[1]"),
    ("plan", _with("search", {"engine": "jax"}, BASE), "search.engine"),
    ("plan", _with("search", {"targets": ["megatron", "bazel"]}, BASE), "search.targets[1]"),
    ("plan", _with("search", {"memory_headroom": 1.0}, BASE), "search.memory_headroom"),
    # a misspelt key leads, with the key meant, before the field it leaves missing
    ("plan", _with("training", {"global_batch": 32, "seq_length": 2048}, BASE), "training.global_batch"),
    ("estimate", _with("model.name", "llama-3-8b", EST), "model.name"),
]

# the same refusals spelled as flags: (argv, field)
FLAG_CASES = [
    (["estimate", "--tp", "3", "--dp", "1"], "parallelism.tp"),
    (["estimate", "--tp", "0"], "parallelism.tp"),
    (["estimate", "--tp", "2,4"], "parallelism.tp"),  # estimate takes one value
    (["estimate", "--tp", "2", "--gpus", "0"], "cluster.num_gpus"),
    (["estimate", "--tp", "2", "--gpu", "tpu-v5"], "cluster.gpu"),
    (["plan", "--top-k", "0"], "search.top_k"),
    (["plan", "--tp", "2,0"], "search.tp[1]"),
]
FLAG_BASE = ["--model", "llama3-8b", "--gpu", "a100-80gb", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def _cli_field(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if x.startswith("error: "))
    return line[len("error: "):].split(": ", 1)[0]


def _id(case) -> str:
    cmd, _, field = case
    return f"{cmd}-{field or 'accepted'}"


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{_id(c)}" for i, c in enumerate(CASES)])
def test_cli_and_rest_agree(case, client, tmp_path):
    command, req, field = case
    if command == "plan" and field is None:
        req = {**req, "search": {"time_limit_s": 5, **req.get("search", {})}}
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req))
    r = client.post(ROUTES[command], json=req)
    c = cli(command, "--request", str(path), "--json")
    if field is None:
        assert r.status_code in (200, 201), r.text
        assert c.returncode == 0, c.stderr
        return
    assert r.status_code == 422, r.text
    assert c.returncode == 2, (c.returncode, c.stderr)
    err = r.json()["error"]
    assert err["details"]["field"] == field, err
    assert _cli_field(c.stderr) == field, c.stderr
    # the same errors in the same order: the REST text is the CLI's `error:` lines, one after
    # the other (the CLI may add which flag to give), and details.errors names their fields
    lines = [x[len("error: "):].split(" (give ")[0] for x in c.stderr.splitlines() if x.startswith("error: ")]
    assert err["message"].startswith(lines[0])
    assert [e["field"] for e in err["details"]["errors"]] == [x.split(": ", 1)[0] for x in lines]
    assert all(x in err["message"] for x in lines)


@pytest.mark.parametrize("argv,field", FLAG_CASES, ids=[" ".join(a) for a, _ in FLAG_CASES])
def test_flags_name_the_request_field(argv, field):
    c = cli(*argv[:1], *FLAG_BASE, *argv[1:])
    assert c.returncode == 2, c.stderr
    assert _cli_field(c.stderr) == field, c.stderr
    assert "allowed" in c.stderr


def _fields(schema: dict, defs: dict, prefix: str, out: set) -> None:
    """Every property path of a JSON schema (refs and anyOf followed)."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    for alt in schema.get("anyOf", []) + schema.get("oneOf", []):
        _fields(alt, defs, prefix, out)
    if "items" in schema:
        _fields(schema["items"], defs, prefix, out)
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        out.add(path)
        _fields(sub, defs, path, out)


def _model_fields(model, prefix: str, out: set) -> None:
    import typing

    from pydantic import BaseModel

    def walk(tp, path):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            _model_fields(tp, path, out)
            return
        for a in typing.get_args(tp):
            walk(a, path)

    for name, info in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        out.add(path)
        walk(info.annotation, path)


@pytest.mark.parametrize("command", sorted(ROUTES))
def test_every_request_field_is_in_openapi(client, command):
    spec = client.get("/openapi.json").json()
    defs = spec["components"]["schemas"]
    body = spec["paths"][ROUTES[command]]["post"]["requestBody"]["content"]["application/json"]["schema"]
    documented: set[str] = set()
    _fields(body, defs, "", documented)
    declared: set[str] = set()
    _model_fields(REQUESTS[command], "", declared)
    assert declared - documented == set()
    for must in ("model.transformer.norm", "model.transformer.head_dim", "model.transformer.moe.num_shared_experts",
                 "search.use_all_gpus", "search.engine", "search.etp", "cluster.nvlink_domain",
                 "cluster.gpu.peak_tflops", "training.grad_dtype", "cluster.inter_node_latency_s"):
        if must.split(".")[0] in REQUESTS[command].model_fields:
            assert must in documented, must
    # each declared field carries a description or an example
    bare = [n for n, d in defs.items() for p, s in (d.get("properties") or {}).items()
            if n in ("Transformer", "MoE", "Cluster", "Training", "Search", "Parallelism", "GpuOverride")
            and not (s.get("description") or s.get("examples"))]
    assert bare == []
