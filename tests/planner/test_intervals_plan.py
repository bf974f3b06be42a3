"""The search keeps the upper bound of the peak, not the point, within the usable memory, so
a plan is one whose `fits` holds; `check` says when only the bound fails; the plan's
economics carry the step time's interval."""

from __future__ import annotations

import pytest

from api.cli.common import fmt_s
from api.cli.plan import print_summary
from cost_model.hardware import intervals
from planner import service
from planner.report.common import fmt_time
from planner.report.page import plan_section

SMALL = {
    "model": {"transformer": {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16,
                              "num_kv_heads": 8, "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu"}},
    "cluster": {"gpu": "a100-40gb", "num_gpus": 8, "price_per_gpu_hour": 2.0},
    "training": {"global_batch_size": 64, "seq_length": 4096, "total_tokens": 10**9},
    "search": {"tp": [1], "pp": [1], "zero": [0], "time_limit_s": 60, "targets": []},
}


def _table(memory_ratio_max: float) -> dict:
    # every bucket falls back to the default (no bucket has enough rows)
    return {"default": {"min_time_rows": 10**9, "min_memory_rows": 10**9, "time_ratio_p10": 0.8,
                        "time_ratio_p90": 1.3, "memory_ratio_max": memory_ratio_max}, "buckets": {}}


@pytest.fixture
def use_table(monkeypatch):
    def use(factor: float):
        intervals.band.cache_clear()
        monkeypatch.setattr(intervals, "table", lambda: _table(factor))
    yield use
    intervals.band.cache_clear()


def test_search_keeps_the_upper_bound_within_capacity(use_table):
    use_table(1.0)
    loose = service.plan(SMALL)
    cap, peak = loose.prediction.memory.capacity_gib, loose.prediction.memory.peak_gib
    assert peak <= cap * (1 - 0.05)  # the default headroom
    # a bound that puts the loose plan's upper bound just over the capacity
    factor = 1.02 * cap / peak
    use_table(factor)
    tight = service.plan(SMALL)
    m = tight.prediction.memory
    assert m.peak_upper_gib == pytest.approx(m.peak_gib * factor)
    assert m.peak_upper_gib <= cap and tight.fits
    assert tight.parallelism != loose.parallelism  # the loose plan is no longer allowed
    for alt in tight.alternatives:  # the runners-up are kept by the same rule
        assert alt.prediction.memory.peak_upper_gib <= cap


def test_a_bound_narrower_than_the_headroom_leaves_the_plan_as_it_was(use_table):
    # usable = capacity x min(1 - headroom, 1 / factor): at factor 1.04 < 1 / 0.95 the headroom binds
    use_table(1.0)
    before = service.plan(SMALL)
    use_table(1.04)
    after = service.plan(SMALL)
    assert after.parallelism == before.parallelism
    assert after.prediction.step_time_s == before.prediction.step_time_s


def test_check_fails_on_the_upper_bound_and_says_the_point_would_fit(use_table):
    use_table(1.0)
    plan = service.plan(SMALL)
    par = plan.model_dump(mode="json")["parallelism"]  # pastes into a check request unchanged
    req = {k: v for k, v in SMALL.items() if k != "search"} | {"parallelism": par}
    ok = service.check(req, 0.5)
    assert ok.fits
    cap, peak = ok.estimate.prediction.memory.capacity_gib, ok.estimate.prediction.memory.peak_gib
    use_table(1.01 * cap / peak)  # the point fits, its bound does not
    res = service.check(req, 0.5)
    assert res.estimate.prediction.memory.peak_gib < cap < res.estimate.prediction.memory.peak_upper_gib
    assert not res.fits and not res.ok
    assert any("upper bound" in r and "would fit" in r for r in res.reasons)


def test_economics_carry_the_step_time_interval(use_table):
    use_table(1.0)
    p = service.plan(SMALL)
    e, pred = p.economics, p.prediction
    assert pred.step_time_s_p10 == pytest.approx(0.8 * pred.step_time_s)
    assert pred.step_time_s_p90 == pytest.approx(1.3 * pred.step_time_s)
    # time to train and cost are linear in the step time
    assert e.time_to_train_h_p10 == pytest.approx(0.8 * e.time_to_train_h)
    assert e.time_to_train_h_p90 == pytest.approx(1.3 * e.time_to_train_h)
    assert e.cost_usd_p10 <= e.cost_usd <= e.cost_usd_p90
    assert e.cost_usd_p90 == pytest.approx(1.3 * e.cost_usd)


def test_the_plan_page_and_the_cli_summary_show_the_band(use_table, capsys):
    use_table(1.0)
    p = service.plan(SMALL)
    pred, e = p.prediction, p.economics
    html = plan_section(p, svgs={})
    assert f"p10-p90 {fmt_time(pred.step_time_s_p10)} - {fmt_time(pred.step_time_s_p90)}" in html
    assert f"upper bound {pred.memory.peak_upper_gib:.1f} of {pred.memory.capacity_gib:.1f} GiB" in html
    assert f"p10-p90 ${e.cost_usd_p10:,.0f} - ${e.cost_usd_p90:,.0f}" in html
    print_summary(p)
    out = capsys.readouterr().out
    assert f"(p10-p90 {fmt_s(pred.step_time_s_p10)} - {fmt_s(pred.step_time_s_p90)})" in out
    assert f"upper bound {pred.memory.peak_upper_gib:.1f}" in out
