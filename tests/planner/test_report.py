"""The pictures, read back as XML: what they show is counted from their elements."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from cost_model.pipeline.stages import pipeline_time_s
from planner.report import render_svgs, scaling_svg, write_report
from planner.report.timeline import shown_ranks, timeline_svg
from planner.schedule import simulation_of
from planner.service import plan as _plan_typed


def plan_request(req: dict) -> dict:
    # the pictures read the plan's JSON shape (what a stored plan or plan.json holds)
    return _plan_typed(req).model_dump(mode="json")

NS = {"s": "http://www.w3.org/2000/svg"}


def _plan(**search) -> dict:
    return plan_request({
        "model": {"name": "llama3-8b"},
        "cluster": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 8, "seq_length": 4096},
        "search": {"time_limit_s": 10, **search},
    })


@pytest.fixture(scope="module")
def pp4_1f1b() -> dict:
    # 4 stages, 1F1B, 8 micro-batches of 1 sequence: dp=1 (tp=2 keeps it on 8 GPUs)
    return _plan(pp=4, tp=2, dp=1, vpp=1, schedule="1f1b", micro_batch_size=1, cp=1)


@pytest.fixture(scope="module")
def uniform_4_stage() -> dict:
    """8 identical layers on 4 GPUs, pipelined 4 ways: uniform stages (no embedding/logits)."""
    layers = [{"name": f"l{i}", "fwd_flops": 2e12, "params": 5e7, "activation_bytes": 2e8, "output_bytes": 1.6e7} for i in range(8)]
    return plan_request({
        "model": {"layers": layers},
        "cluster": {"gpu": "h100-sxm", "num_gpus": 4, "gpus_per_node": 4},
        "training": {"global_batch_size": 8, "seq_length": 2048},
        "search": {"pp": 4, "tp": 1, "dp": 1, "vpp": 1, "schedule": "1f1b", "micro_batch_size": 1, "time_limit_s": 10},
    })


def _ops(svg: str, rank: int) -> list[tuple[str, int]]:
    root = ET.fromstring(svg)
    row = root.find(f".//s:g[@id='rank-{rank}']", NS)
    assert row is not None
    ops = []
    for r in row.findall("s:rect", NS):
        cls = (r.get("class") or "").split()
        if "op" in cls and ("forward" in cls or "backward" in cls):
            ops.append((float(r.get("x")), "F" if "forward" in cls else "B", int(r.get("data-mb"))))
    return [(k, mb) for _, k, mb in sorted(ops)]


@pytest.mark.parametrize("which", ["uniform_4_stage", "pp4_1f1b"])
def test_timeline_of_4_stage_1f1b_with_8_micro_batches(which, request):
    plan = request.getfixturevalue(which)
    par = plan["parallelism"]
    assert (par["pp"], par["vpp"], par["schedule"], par["num_micro_batches"]) == (4, 1, "1f1b", 8)
    svg = timeline_svg(plan)
    for r in range(4):
        ops = _ops(svg, r)
        assert sum(k == "F" for k, _ in ops) == 8 and sum(k == "B" for k, _ in ops) == 8
        warm = 4 - r - 1  # Narayanan et al. SC'21 §2.2: p - r - 1 warm-up forwards, then 1F1B
        expect = [("F", i) for i in range(warm)]
        for k in range(8 - warm):
            expect += [("F", warm + k), ("B", k)]
        expect += [("B", k) for k in range(8 - warm, 8)]
        assert ops == expect


def test_simulated_step_equals_the_formula(uniform_4_stage):
    assert uniform_4_stage["parallelism"]["stage_layers"] == [2, 2, 2, 2]
    block = uniform_4_stage["schedule"]
    sim = simulation_of(block)
    fwd, bwd = [[0.0] for _ in range(4)], [[0.0] for _ in range(4)]
    for s in block["stages"]:
        fwd[s["rank"]][0] += (s["fwd_ms"] + s["send_fwd_ms"]) / 1e3
        bwd[s["rank"]][0] += (s["bwd_ms"] + s["recompute_ms"] + s["send_bwd_ms"]) / 1e3
    formula = pipeline_time_s(fwd, bwd, 8, 1, "1f1b")
    assert sim.pipeline_time_s == pytest.approx(formula, rel=0.005)
    # and the whole step (with the DP/optimizer tail) against the plan's closed-form step
    assert block["simulated_step_time_s"] == pytest.approx(uniform_4_stage["prediction"]["step_time_s"], rel=0.005)
    assert not any(r.startswith("schedule simulation") for r in uniform_4_stage["reasons"])


def test_uneven_stages_report_the_simulated_step(pp4_1f1b):
    """llama3-8b: the ends carry embedding and logits, so the stages are uneven; the plan keeps
    the closed form in step_time_s and carries the simulation beside it."""
    block = pp4_1f1b["schedule"]
    assert block["formula_step_time_s"] == pp4_1f1b["prediction"]["step_time_s"]
    assert block["difference"] == pytest.approx(block["simulated_step_time_s"] / block["formula_step_time_s"] - 1)
    said = any(r.startswith("schedule simulation") for r in pp4_1f1b["reasons"])
    assert said == (abs(block["difference"]) > 0.005)


def test_every_picture_parses_and_has_its_parts(pp4_1f1b):
    svgs = render_svgs(pp4_1f1b)
    assert set(svgs) == {"timeline", "breakdown", "memory", "alternatives"}
    for name, svg in svgs.items():
        root = ET.fromstring(svg)
        assert root.get("id") == name and float(root.get("width")) > 0 and float(root.get("height")) > 0
    mem = ET.fromstring(svgs["memory"])
    bars = mem.findall(".//s:g[@class='stage-bar']", NS)
    assert len(bars) == 4
    # the stacked parts of each rank add up to its peak (the label over the bar)
    ranks = pp4_1f1b["schedule"]["ranks"]
    for r in ranks:
        parts = sum(r[k] for k in ("weights_gib", "grads_gib", "optimizer_gib", "activations_gib", "transients_gib", "margins_gib"))
        assert parts == pytest.approx(r["peak_gib"], rel=1e-9)
    assert max(r["peak_gib"] for r in ranks) == pytest.approx(pp4_1f1b["prediction"]["memory"]["peak_gib"], rel=1e-9)
    assert mem.find(".//s:line[@class='capacity']", NS) is not None
    assert mem.find(".//s:line[@class='headroom']", NS) is not None
    alt = ET.fromstring(svgs["alternatives"])
    assert len(alt.findall(".//s:g[@data-rank]", NS)) == 1 + len(pp4_1f1b["alternatives"])
    bd = ET.fromstring(svgs["breakdown"])
    assert len(bd.findall(".//s:g[@class='term-row']", NS)) == 9


def test_large_pipelines_show_first_middle_and_last_ranks():
    assert shown_ranks(16) == list(range(16))
    rows = shown_ranks(64)
    assert rows[:3] == [0, 1, 2] and rows[-3:] == [61, 62, 63] and 32 in rows and None in rows


def test_plan_without_schedule_block_still_draws(pp4_1f1b):
    old = {k: v for k, v in pp4_1f1b.items() if k != "schedule"}
    svg = timeline_svg(old)
    assert "approximate" in svg
    assert len(_ops(svg, 0)) == 16


def test_write_report_is_self_contained(pp4_1f1b, tmp_path):
    paths = write_report(json.loads(json.dumps(pp4_1f1b)), tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["alternatives.svg", "breakdown.svg", "memory.svg", "report.html", "timeline.svg"]
    html = (tmp_path / "report.html").read_text()
    assert "<script src" not in html and "<link rel" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert html.count("<svg") == 4


def test_scaling_svg_marks_every_point():
    sweep = {"axis": "num_gpus", "model": "m", "gpu": "g", "fixed": {}, "points": [
        {"value": 8, "ok": True, "parallelism": {"dp": 8, "tp": 1, "pp": 1, "num_micro_batches": 1}, "step_time_s": 2.0,
         "tokens_per_s": 1e5, "mfu": 0.5, "peak_gib": 60.0},
        {"value": 16, "ok": True, "parallelism": {"dp": 16, "tp": 1, "pp": 1, "num_micro_batches": 1}, "step_time_s": 1.0,
         "tokens_per_s": 2e5, "mfu": 0.5, "peak_gib": 60.0},
        {"value": 24, "ok": False, "error": "no plan fits"},
    ]}
    root = ET.fromstring(scaling_svg(sweep))
    assert len(root.findall(".//s:circle[@class='point']", NS)) == 3 * 2
    assert "no plan fits" in scaling_svg(sweep)


def test_long_schedules_are_binned_and_keep_each_phases_time():
    """pp=8 x 512 micro-batches: blocks are sub-pixel, so each row is drawn as bins whose
    forward area equals the rank's forward time (the mean share of a run keeps its area)."""
    pp, m, f_ms, b_ms = 8, 512, 1.0, 2.0
    block = {"schedule": "1f1b", "pp": pp, "vpp": 1, "num_micro_batches": m,
             "stages": [{"index": s, "rank": s, "fwd_ms": f_ms, "bwd_ms": b_ms} for s in range(pp)],
             "ranks": [{"rank": r} for r in range(pp)]}
    plan = {"parallelism": {"pp": pp, "vpp": 1, "schedule": "1f1b", "num_micro_batches": m}, "stages": [], "schedule": block}
    svg = timeline_svg(plan, fold=False)  # every micro-batch (the page folds the steady state)
    assert len(svg) < 200_000
    root = ET.fromstring(svg)
    sim = simulation_of(block)
    px = (float(root.get("width")) - 78 - 90) / sim.step_time_s  # the plot width over the step
    for r in (0, pp - 1):
        row = root.find(f".//s:g[@id='rank-{r}']", NS)
        area = {"forward": 0.0, "backward": 0.0}
        for rect in row.findall("s:rect", NS):
            cls = (rect.get("class") or "").split()
            if "binned" in cls and cls[1] in area:
                area[cls[1]] += float(rect.get("width")) * float(rect.get("height")) / 22.0 / px
        assert area["forward"] * 1e3 == pytest.approx(m * f_ms, rel=0.02)
        assert area["backward"] * 1e3 == pytest.approx(m * b_ms, rel=0.02)


def test_empty_end_stages_draw_and_list_as_none():
    """A plan whose first stage holds only the embedding and last only the loss (pp 2 x vpp
    5 for 8 blocks): every picture parses, the simulated step is the closed form's within the
    plan's stated difference, and the stage table lists the two stages as holding no block."""
    layers = [{"name": f"l{i}", "fwd_flops": 2e12, "params": 5e7, "activation_bytes": 2e8, "output_bytes": 1.6e7} for i in range(8)]
    plan = plan_request({
        "model": {"layers": layers},
        "cluster": {"gpu": "h100-sxm", "num_gpus": 4, "gpus_per_node": 4},
        "training": {"global_batch_size": 8, "seq_length": 2048},
        "search": {"pp": 2, "tp": 1, "dp": 2, "vpp": 5, "micro_batch_size": 1, "time_limit_s": 10},
    })
    assert plan["parallelism"]["stage_layers"] == [0] + [1] * 8 + [0]
    for name, svg in render_svgs(plan).items():
        assert ET.fromstring(svg).get("id") == name
    block = plan["schedule"]
    assert block["difference"] == pytest.approx(block["simulated_step_time_s"] / block["formula_step_time_s"] - 1)
    from planner.report.page import plan_section

    html = plan_section(plan)
    assert html.count("<td>none</td>") == 2


def test_degrees_card_names_the_moe_schedule_and_dispatcher():
    """The page's knob line says what the launch switches on for the expert layers: the
    overlapped 1F1B all-to-all and a dispatcher other than Megatron-Core's default."""
    from planner.report.common import knobs

    base = {"micro_batch_size": 1, "zero": 1, "schedule": "interleaved"}
    assert "a2a-overlap" not in knobs(base) and "ep:" not in knobs(base)
    line = knobs({**base, "moe_a2a_overlap": True, "moe_dispatcher": "deepep"})
    assert "a2a-overlap" in line and "ep:deepep" in line
    assert "ep:" not in knobs({**base, "moe_dispatcher": "alltoall"})


def test_zbv_timeline_draws_input_and_weight_gradients_in_torchs_order():
    """A ZBV plan (runtime engine, pp 4 x 2 chunks in a V): every rank's row draws forward,
    input-gradient (B) and weight-gradient (W) blocks in torch's order (order.zbv_order), and
    the reasons say what the schedule saved against the unsplit one."""
    from cost_model.pipeline.order import rank_stages, zbv_order

    # every degree pinned: the search's line for a V schedule is found, not proven (space.py), so a
    # short limit ends it
    plan = _plan(pp=4, tp=2, dp=1, vpp=2, schedule="zbv", micro_batch_size=1, cp=1, engine="runtime",
                 time_limit_s=2)
    par = plan["parallelism"]
    assert (par["schedule"], par["vpp"]) == ("zbv", 2)
    svg = timeline_svg(plan, fold=False)
    root = ET.fromstring(svg)
    for r in range(4):
        row = root.find(f".//s:g[@id='rank-{r}']", NS)
        chunk_of = {s: c for c, s in enumerate(rank_stages(r, 4, 2, "zbv"))}
        ops = []
        for rect in row.findall("s:rect", NS):
            cls = (rect.get("class") or "").split()
            kind = {"forward": "F", "backward": "I", "wgrad": "W"}.get(next((c for c in cls if c != "op"), ""), None)
            if "op" in cls and kind:
                ops.append((float(rect.get("x")), kind, int(rect.get("data-mb")), chunk_of[int(rect.get("data-stage"))]))
        assert [o[1:] for o in sorted(ops)] == list(zbv_order(4, r, par["num_micro_batches"]))
    assert any(line.startswith("schedule zbv: bubble") for line in plan["reasons"])
