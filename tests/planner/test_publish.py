"""The best plan so far that a running search publishes (BestFirstSearch.snapshot,
planner/publish.py) is honest: each snapshot's plan is no faster than the optimum the
exhaustive reference search finds, and its lower bound (hence its gap) is never above that
optimum; the publisher hands out only the newest offer and nothing once stopped."""

from __future__ import annotations

import random
import threading
import time

import pytest

from cost_model.specs.errors import SpecError
from planner import exhaustive
from planner.publish import LatestPublisher
from planner.search import search
from planner.service import problem_from_request

from .test_exhaustive_equivalence import draw_request


def test_every_snapshot_is_bounded_by_the_exhaustive_optimum(monkeypatch):
    # the draws the brute force takes in well under a second each (a test of seconds)
    monkeypatch.setattr(exhaustive, "MAX_EVALUATIONS", 20_000)
    rng = random.Random(7)
    compared = published = 0
    for _ in range(80):
        if compared >= 8:
            break
        req = draw_request(rng)
        try:
            prob = problem_from_request(req)
            ref = search(prob, exhaustive=True)
        except SpecError:
            continue  # the brute force refuses it (too big), or the draw is not a valid request
        snapshots = []
        res = search(prob, publish=snapshots.append)
        if not ref.best:
            assert not res.best and not snapshots
            continue
        compared += 1
        optimum_s = ref.best[0].estimate.prediction.step_time_s
        assert res.best[0].estimate.prediction.step_time_s == pytest.approx(optimum_s, rel=1e-6)
        assert snapshots, "the search published its first plan at least"
        published += len(snapshots)
        for snap in snapshots:
            best_s = snap.best[0].estimate.prediction.step_time_s
            assert best_s >= optimum_s * (1 - 1e-9)
            assert snap.stats.lower_bound_s <= optimum_s * (1 + 1e-9)
            assert snap.stats.timed_out and snap.status == "feasible"
            assert snap.gap == pytest.approx((best_s - min(snap.stats.lower_bound_s, best_s)) / best_s)
            assert snap.gap >= (best_s - optimum_s) / best_s - 1e-9  # the gap covers the true distance
        times = [s.best[0].estimate.prediction.step_time_s for s in snapshots]
        assert times == sorted(times, reverse=True)  # published as the best plan improved
    assert compared >= 8 and published > compared, (compared, published)


def test_the_publisher_hands_out_the_newest_offer_and_nothing_after_it_stops():
    got, release = [], threading.Event()

    def build(x: int) -> int:
        release.wait(5)  # the first build is slow: the offers meanwhile replace each other
        return x * 10

    with LatestPublisher(build, got.append, every_s=0.0) as pub:
        pub.offer(1)
        time.sleep(0.1)
        for x in (2, 3, 4):
            pub.offer(x)
        release.set()
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [10, 40]
        release.clear()
        pub.offer(5)  # being built as the publisher stops: never handed out
        time.sleep(0.1)
    release.set()
    time.sleep(0.2)
    assert got == [10, 40]
