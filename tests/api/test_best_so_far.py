"""A solve whose process is killed is answered with the best plan its search had published
(planner/publish.py, api/worker.py best_so_far_sink): a real search, killed mid-run by its
run limit in a real worker process, locally and through a real `planner worker` behind Redis;
and the service's own solve (_run_plan) stops its search before that kill.
The plan it leaves is a real one: it re-prices through the estimate path to the same step
time and memory, and says that its search did not finish (timed out, its gap)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from api.routes.plans import _killed_plan, _run_plan
from api.worker import SolverPool, SolveTimeout, best_so_far_sink
from planner.ids import new_plan_id
from planner.plan import Plan
from planner.request.schema import PlanRequest
from planner.service import estimate
from planner.service import plan as plan_request

from .test_queue import slow_plan

SEARCH_LIMIT_S = 30.0  # the search would run this long; its process is killed first
RUN_LIMIT_S = 4.0


def _request() -> PlanRequest:
    body = slow_plan(3)
    body["search"] = {"time_limit_s": SEARCH_LIMIT_S}  # the default launch targets, emitted with it
    return PlanRequest.model_validate(body)


def run_past_its_kill(req: PlanRequest, profile, limit_s: float, plan_id: str) -> Plan:
    """_run_plan with a search that does not stop before its process is killed (it is given
    its whole limit, not search_limit_s): a solve that something no deadline reaches holds
    past its run limit. Top level: it runs in a worker process."""
    sink = best_so_far_sink()
    return plan_request(req, profile=profile, time_limit_s=limit_s, plan_id=plan_id,
                        publish=lambda p: sink(p.to_json()))


def _killed(pool, req: PlanRequest) -> tuple[SolveTimeout, float]:
    async def go():
        t0 = time.perf_counter()
        with pytest.raises(SolveTimeout) as err:
            await pool.submit_timed(run_past_its_kill, req, None, SEARCH_LIMIT_S, new_plan_id(), timeout_s=60,
                                    run_limit_s=RUN_LIMIT_S)
        return err.value, time.perf_counter() - t0

    return asyncio.run(go())


def check_best_so_far(exc: SolveTimeout, req: PlanRequest) -> None:
    assert exc.killed and exc.best_so_far is not None, exc.reason
    plan = _killed_plan(exc.best_so_far, exc)
    assert plan.search.timed_out and plan.status == "feasible"
    assert 0 < plan.search.gap < 1 and plan.search.solve_time_s < RUN_LIMIT_S
    assert any(r.startswith("search unfinished") for r in plan.reasons)
    assert plan.reasons[-1].startswith("answered with the best plan so far: its process was killed")
    assert plan.launch and "megatron" in plan.launch  # finished as a full answer would be
    # a real, priced plan: the estimate of its own configuration gives its numbers
    doc = json.loads(plan.to_json())
    given = {k: v for k, v in req.model_dump(mode="json", exclude_none=True).items() if k != "search"}
    est = estimate({**given, "parallelism": doc["parallelism"]})
    assert est.prediction.step_time_s == pytest.approx(plan.prediction.step_time_s, rel=1e-12)
    assert est.prediction.memory.peak_gib == pytest.approx(plan.prediction.memory.peak_gib, rel=1e-12)
    assert est.fits and plan.fits


def test_a_killed_solve_answers_with_its_best_plan_so_far():
    pool = SolverPool(workers=1, queue_size=0, max_tasks=1)
    try:
        pool.warm()
        req = _request()
        exc, took = _killed(pool, req)
        assert took < RUN_LIMIT_S + 2  # the kill, not the search's own limit, ended it
        check_best_so_far(exc, req)
        # a solve killed before it found anything leaves nothing: the 503 stays
        async def bare():
            with pytest.raises(SolveTimeout) as err:
                await pool.submit(time.sleep, 30, timeout_s=30, run_limit_s=0.5)
            return err.value

        assert asyncio.run(bare()).best_so_far is None
    finally:
        pool.shutdown()


def test_the_services_solve_stops_its_search_before_the_kill():
    """_run_plan gives its search what is left before the kill, less KILL_AFTER_S
    (search_limit_s): the same request and run limit are answered by the search itself."""
    pool = SolverPool(workers=1, queue_size=0, max_tasks=1)
    try:
        pool.warm()

        async def go():
            return await pool.submit_timed(_run_plan, _request(), None, SEARCH_LIMIT_S, new_plan_id(), timeout_s=60,
                                           run_limit_s=RUN_LIMIT_S + 2)

        plan, timing = asyncio.run(go())
        assert timing.run_s < RUN_LIMIT_S + 2 and plan.search.timed_out
        assert plan.search.time_limit_s == pytest.approx(1.0, abs=0.3)  # 6 s to the kill, less 5
    finally:
        pool.shutdown()
