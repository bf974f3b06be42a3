"""The pictures and the page say what they draw and stay readable at scale: a folded
timeline past 16 micro-batches, memory titled per pipeline rank, a log2 sweep axis with one
number format, and 'Why this plan' holding only lines about the plan."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from planner.plan import ENGINE_RULE_PREFIX
from planner.report import scaling_svg
from planner.report.memory import memory_svg
from planner.report.page import plan_section, split_reasons
from planner.report.svg import fmt_num
from planner.report.timeline import FOLD_AFTER, timeline_svg
from planner.schedule import simulation_of
from planner.service import plan as plan_typed

NS = {"s": "http://www.w3.org/2000/svg"}


def _synthetic(pp: int, m: int, schedule: str = "1f1b", vpp: int = 1) -> dict:
    """A plan holding only what the timeline reads: pp ranks of equal stages."""
    stages = [{"index": s, "rank": s % pp, "fwd_ms": 1.0, "bwd_ms": 2.0} for s in range(pp * vpp)]
    block = {"schedule": schedule, "pp": pp, "vpp": vpp, "num_micro_batches": m, "stages": stages,
             "ranks": [{"rank": r} for r in range(pp)]}
    return {"parallelism": {"pp": pp, "vpp": vpp, "schedule": schedule, "num_micro_batches": m}, "stages": [],
            "schedule": block}


def _row_ops(root, rank: int) -> list:
    row = root.find(f".//s:g[@id='rank-{rank}']", NS)
    return [r for r in row.findall("s:rect", NS) if "op" in (r.get("class") or "").split()]


@pytest.mark.parametrize(("pp", "m", "schedule", "vpp"), [(4, 32, "1f1b", 1), (4, 128, "1f1b", 1), (4, 64, "interleaved", 2),
                                                          (8, 128, "interleaved", 2)])
def test_long_timelines_fold_the_steady_state(pp, m, schedule, vpp):
    """32-128 micro-batches: the warm-up, one period and the cool-down are drawn as blocks
    wide enough to read (not bins, not slivers), the fold marker says how many periods it
    stands for, the title says what is drawn, and the cut is whole periods of the real step."""
    plan = _synthetic(pp, m, schedule, vpp)
    root = ET.fromstring(timeline_svg(plan))
    full = ET.fromstring(timeline_svg(plan, fold=False))
    full_w = [float(o.get("width")) for o in _row_ops(full, 0) if "forward" in o.get("class") and "binned" not in o.get("class")]
    title = root.find("s:title", NS).text
    fold = root.find(".//s:g[@class='fold']", NS)
    assert fold is not None, title
    periods, folded = int(fold.get("data-periods")), int(fold.get("data-micro-batches"))
    group = pp if schedule == "interleaved" else 1
    assert folded == periods * group and periods >= 2
    assert f"{m} micro-batches" in title and "warm-up" in title and "cool-down" in title and f"× {periods} folded" in title
    assert fold.find("s:text[@class='fold-label']", NS).text == f"× {periods}"
    for r in range(pp):
        ops = _row_ops(root, r)
        assert not any("binned" in (o.get("class") or "") for o in ops)
        widths = sorted(float(o.get("width")) for o in ops if "forward" in o.get("class"))
        # the median forward is a readable block, several times wider than drawn in full
        assert widths[len(widths) // 2] >= 4.0, (r, widths[:5])
        assert not full_w or widths[len(widths) // 2] >= 3 * max(full_w)
        # what is drawn plus what is folded is every forward of the rank
        whole = [o for o in ops if "forward" in o.get("class")]
        assert len({(o.get("data-mb"), o.get("data-stage")) for o in whole}) + folded * vpp >= m * vpp - 2 * vpp
    # the fold is whole periods of the simulated steady state: the drawn step is shorter by exactly that
    sim = simulation_of(plan["schedule"])
    per_mb = max(sum(e.end_s - e.start_s for e in sim.events if e.rank == r and e.phase in ("forward", "backward"))
                 for r in range(pp)) / m
    tip = fold.find("s:rect/s:title", NS).text
    a, b = (float(x.replace(",", "")) for x in re.search(r"([\d,.]+)-([\d,.]+) ms", tip).groups())
    assert (b - a) / 1e3 == pytest.approx(folded * per_mb, rel=1e-3)


def test_short_timelines_are_drawn_in_full():
    root = ET.fromstring(timeline_svg(_synthetic(4, FOLD_AFTER)))
    assert root.find(".//s:g[@class='fold']", NS) is None
    assert f"all {FOLD_AFTER} micro-batches" in root.find("s:title", NS).text
    assert sum("forward" in o.get("class") for o in _row_ops(root, 0)) == FOLD_AFTER


def test_gpipe_is_not_folded():
    root = ET.fromstring(timeline_svg(_synthetic(4, 64, "gpipe")))
    assert root.find(".//s:g[@class='fold']", NS) is None


def test_timeline_axis_reads_real_time_across_the_fold():
    root = ET.fromstring(timeline_svg(_synthetic(4, 128)))
    labels = [t.text for t in root.findall(".//s:g[@class='axis']/s:text", NS)][:-1]
    values = [float(x[:-1]) * 1e3 if x.endswith("k") else float(x) for x in labels]
    assert values == sorted(values) and len(values) >= 4  # increasing, jumping at the fold
    assert "jumps over the folded steady state" in root.find(".//s:g[@class='axis']", NS)[-1].text


@pytest.fixture(scope="module")
def interleaved_plan() -> dict:
    """torchtitan, pp4 x vpp3, 64 micro-batches: a long interleaved schedule whose reasons
    quote an engine rule about a ZeRO level the plan does not use."""
    return plan_typed({
        "model": {"name": "llama3-8b"}, "engine": "torchtitan",
        "cluster": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_length": 4096},
        "search": {"time_limit_s": 10, "pp": 4, "tp": 2, "micro_batch_size": 1, "vpp": 3},
    }).model_dump(mode="json")


def test_memory_picture_says_it_draws_pipeline_ranks(interleaved_plan):
    svg = memory_svg(interleaved_plan)
    root = ET.fromstring(svg)
    title = root.find("s:title", NS).text
    assert title.startswith("Peak memory per pipeline rank") and "4 ranks" in title and "3 model chunks" in title
    assert "per stage" not in svg and "per pipeline stage" not in svg
    assert len(root.findall(".//s:g[@class='stage-bar']", NS)) == interleaved_plan["parallelism"]["pp"]
    html = plan_section(interleaved_plan)
    assert "Memory per stage" not in html and "<h3>Peak memory per pipeline rank</h3>" in html


def test_why_this_plan_holds_the_plan_and_folds_the_engine_rules(interleaved_plan):
    reasons = interleaved_plan["reasons"]
    rules = [r for r in reasons if r.startswith(ENGINE_RULE_PREFIX)]
    assert rules, reasons  # torchtitan has no ZeRO-1: said, though the plan does not use it
    about, folded = split_reasons(reasons)
    assert len(about) + len(folded) == len(reasons) and not any(r.startswith(ENGINE_RULE_PREFIX) for r in about)
    html = plan_section(interleaved_plan)
    listed = html[html.index('<ul class="reasons" id="reasons">'):]
    listed = listed[:listed.index("</ul>")]
    assert "no ZeRO-1" not in listed and listed.count("<li>") == len(about)
    details = html[html.index('<details class="engine-rules"'):]
    assert "<summary>engine rules (1)" in details and "no ZeRO-1" in details[:details.index("</details>")]
    assert "pp=4 x vpp=3" in listed


def _sweep(values: list[int]) -> dict:
    pts = []
    for i, v in enumerate(values):
        pts.append({"value": v, "ok": True, "parallelism": {"dp": v, "tp": 1, "pp": 1, "num_micro_batches": 1},
                    "step_time_s": 2.0 / (i + 1), "tokens_per_s": 371_200.0 * 3.5 ** i, "mfu": 0.5, "peak_gib": 60.0})
    return {"axis": "num_gpus", "model": "m", "gpu": "g", "fixed": {}, "points": pts}


def test_sweep_axis_is_log2():
    root = ET.fromstring(scaling_svg(_sweep([8, 16, 64, 24])))
    panel = root.find(".//s:g[@id='scaling-step_time_s']", NS)
    x = {int(c.get("data-value")): float(c.get("cx")) for c in panel.findall("s:circle[@class='point']", NS)}
    unit = x[16] - x[8]  # one doubling
    assert x[64] - x[16] == pytest.approx(2 * unit, abs=0.02)
    assert x[24] - x[16] == pytest.approx(math.log2(24 / 16) * unit, abs=0.02)
    assert "GPUs (log2 scale)" in scaling_svg(_sweep([8, 16]))


def test_one_number_format_throughout():
    """371.2k beside 1.2991M was two formats: every value label is fmt_num's (3 significant
    digits, k / M suffix), on the sweep and on the page's throughput card."""
    svg = scaling_svg(_sweep([8, 16, 32]))
    root = ET.fromstring(svg)
    panel = root.find(".//s:g[@id='scaling-tokens_per_s']", NS)
    labels = [t.text for t in panel.findall("s:text[@class='value']", NS)]
    assert labels == ["371k", "1.3M", "4.55M"]
    assert "1.2991M" not in svg and "371.2k" not in svg
    assert [fmt_num(v) for v in (0.121, 49.73, 2500, 371_200, 1_299_100, 999_950)] == ["0.121", "49.7", "2.5k", "371k", "1.3M", "1M"]


def test_throughput_card_uses_the_same_format(interleaved_plan):
    html = plan_section(interleaved_plan)
    assert f"{fmt_num(interleaved_plan['prediction']['tokens_per_s'])} tok/s" in html
