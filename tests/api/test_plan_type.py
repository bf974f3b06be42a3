"""The typed Plan is the one shape of every plan document: `POST /v1/plans`, `planner plan
--json` and the plan.json that `--emit` writes parse with `Plan.model_validate_json`, the
emitted file carries the same keys as the response body, and the derived sizes of the
parallel layout are the products of its degrees."""

from __future__ import annotations

import json
import subprocess
import sys

from cost_model.specs.inputs import ParallelConfig
from planner.plan import Plan

from .conftest import ROOT, SMALL, TOKEN


def _keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict) and k not in ("launch", "ranks", "sources", "links"):  # links: REST answers only
            out |= _keys(v, prefix + k + ".")
    return out


def test_rest_cli_and_plan_json_share_the_plan_type(server, client, tmp_path):
    r = client.post("/v1/plans", json=SMALL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code in (200, 201), r.text
    rest = Plan.model_validate_json(r.content)
    assert rest.engine == "megatron" and rest.parallelism.etp == 1
    assert rest.model.total_params > 0 and rest.model.active_params == rest.model.total_params  # dense model

    req = tmp_path / "req.json"
    req.write_text(json.dumps(SMALL))
    out = tmp_path / "emit"
    cp = subprocess.run([sys.executable, "-m", "api.cli", "plan", "--request", str(req), "--json", "--emit", str(out)],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    cli = Plan.model_validate_json(cp.stdout)
    emitted = Plan.model_validate_json((out / "plan.json").read_text())
    assert emitted == cli
    # same request, same answer (ids and hashes name the request, timings are wall-clock)
    assert cli.parallelism == rest.parallelism and cli.stages == rest.stages
    assert _keys(json.loads((out / "plan.json").read_text())) == _keys(r.json())


def test_parallelism_derived_sizes():
    p = ParallelConfig(dp=4, tp=2, pp=3, cp=2, ep=4, sequence_parallel=True, micro_batch_size=2, num_micro_batches=5)
    assert p.world_size == 4 * 2 * 3 * 2
    assert p.dense_dp_size == 4 * 2
    assert p.expert_dp_size == 2 * 2 * 4 // 4  # folding: tp*cp*dp/(ep*etp)
    assert p.seq_divisor == 2 * 2
    assert ParallelConfig(tp=4, cp=2).seq_divisor == 2  # no SP: only CP splits the sequence
    assert p.global_batch_size == 2 * 5 * 4
    assert p["tp"] == p.tp and p.get("nope", 7) == 7


def test_stored_plan_is_served_as_answered(server, client):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    r = client.post("/v1/plans", json=SMALL, headers=headers)
    assert r.status_code in (200, 201), r.text
    again = client.get(r.headers["location"], headers=headers)
    assert again.content == r.content  # the one JSON text, kept by the store
    hit = client.post("/v1/plans", json=SMALL, headers=headers)
    assert hit.status_code == 200 and hit.headers["X-Plan-Cache"] == "hit" and hit.content == again.content


def test_check_searches_without_emitting():
    from planner.service import check

    res = check({**SMALL, "parallelism": {"tp": 2, "dp": 4}}, max_slowdown=10.0)
    assert res.best is not None and res.best.launch == {} and res.best.ranks is None
    assert res.slowdown == res.step_time_s / res.best.prediction.step_time_s - 1


def test_non_finite_numbers_are_refused_not_nulled():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from api import errors
    from api.routes._common import FiniteJSONResponse
    from cost_model.specs.results import TimeBreakdown

    app = FastAPI()
    errors.install(app)
    terms = dict.fromkeys(TimeBreakdown.model_fields, 0.0)

    @app.get("/t", response_model=TimeBreakdown, response_class=FiniteJSONResponse)
    def t():
        return TimeBreakdown(**{**terms, "compute_s": float("inf")})

    r = TestClient(app).get("/t")
    assert r.status_code == 422 and r.json()["error"]["code"] == "non_finite"


def test_plan_parameter_counts_follow_the_model_cards():
    # Mixtral 8x22B: "141B parameters, 39B active" (mistral.ai/news/mixtral-8x22b); Llama 3
    # 70B: 70.6B (the Hugging Face safetensors count of Meta-Llama-3-70B). Embeddings counted.
    from cost_model.model.presets import get_preset
    from planner.service import _model_summary

    moe = _model_summary(get_preset("mixtral-8x22b"))
    assert abs(moe.total_params / 141e9 - 1) < 0.01 and abs(moe.active_params / 39e9 - 1) < 0.01
    dense = _model_summary(get_preset("llama3-70b"))
    assert abs(dense.total_params / 70.6e9 - 1) < 0.01 and dense.active_params == dense.total_params
