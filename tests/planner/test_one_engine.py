"""One engine per request: named once (top-level `engine`, or one of its older spellings in
`search` / `parallelism`), read by plan, estimate and check alike; a plan's `parallelism`
block pastes into estimate and check unchanged. The reference for each engine is the plan
that engine's own search returns: check must price the given configuration as `estimate`
does and find the same best plan as `plan`."""

from __future__ import annotations

import json

import pytest

from cost_model.specs.errors import SpecError
from cost_model.specs.vocab import Engine, values
from planner import service
from planner.request.errors import validate_as
from planner.request.schema import CheckRequest, EstimateRequest, PlanRequest

SMALL = {
    "model": {"transformer": {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16,
                              "num_kv_heads": 8, "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu"}},
    "cluster": {"gpu": "a100-40gb", "num_gpus": 16},
    "training": {"global_batch_size": 32, "seq_length": 2048},
}
SEARCH = {"time_limit_s": 60, "targets": []}


@pytest.fixture(scope="module", params=values(Engine))
def engine_plan(request):
    engine = request.param
    return engine, service.plan({**SMALL, "engine": engine, "search": SEARCH})


def test_check_and_estimate_agree_with_the_plan_of_the_same_engine(engine_plan):
    engine, plan = engine_plan
    assert plan.engine == engine and plan.parallelism.engine == engine
    pasted = json.loads(plan.model_dump_json())["parallelism"]  # the plan's block, as a user copies it
    est = service.estimate({**SMALL, "engine": engine, "parallelism": pasted})
    assert est.prediction.step_time_s == pytest.approx(plan.prediction.step_time_s, rel=1e-12)
    res = service.check({**SMALL, "engine": engine, "parallelism": pasted, "search": SEARCH})
    assert res.step_time_s == pytest.approx(plan.prediction.step_time_s, rel=1e-12)
    assert res.best is not None and res.best.engine == engine
    assert res.best_step_time_s == pytest.approx(plan.prediction.step_time_s, rel=1e-9)
    assert res.ok and res.slowdown == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("where", ["top", "search", "parallelism"])
def test_every_spelling_names_the_same_one_engine(where):
    """Named in any one place, the engine reaches the search, the configuration and the
    request alike (the check prices both with it)."""
    req = {**SMALL, "parallelism": {"dp": 16}, "search": {}}
    if where == "top":
        req["engine"] = "torchtitan"
    else:
        req[where] = {**req[where], "engine": "torchtitan"}
    r = validate_as(CheckRequest, req)
    assert r.engine == r.search.engine == r.parallelism.engine == "torchtitan"


def test_a_check_without_a_search_block_searches_for_its_engine():
    res = service.check({**SMALL, "parallelism": {"dp": 16, "zero": 3, "engine": "torchtitan"}})
    assert res.best is not None and res.best.engine == "torchtitan"


@pytest.mark.parametrize("schema", [PlanRequest, CheckRequest])
def test_two_engines_are_refused_naming_both(schema):
    req = {**SMALL, "engine": "torchtitan", "search": {"engine": "deepspeed"}}
    if schema is CheckRequest:
        req["parallelism"] = {"dp": 16}
    with pytest.raises(SpecError) as exc:
        validate_as(schema, req)
    assert exc.value.field == "engine"
    assert "engine: torchtitan" in exc.value.message and "search.engine: deepspeed" in exc.value.message


def test_an_unknown_engine_is_refused_where_it_is_written():
    with pytest.raises(SpecError) as exc:
        validate_as(EstimateRequest, {**SMALL, "parallelism": {"dp": 16, "engine": "megatorn"}})
    assert exc.value.field == "parallelism.engine"


def test_stated_micro_batches_must_match_the_batch():
    with pytest.raises(SpecError) as exc:
        service.estimate({**SMALL, "parallelism": {"dp": 16, "num_micro_batches": 4}})
    assert exc.value.field == "parallelism.num_micro_batches"
    assert exc.value.allowed == [2]  # 32 sequences / (dp 16 x micro-batch 1)
