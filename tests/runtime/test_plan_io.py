"""Plan validation and --scale-down: pure Python, and bad plans refused before any
process group exists (exit 2, message names the field)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cost_model.specs.inputs import ParallelConfig
from planner.plan import TrainingEcho
from planner.runtime.plan_io import PlanError, parse_plan, scale_down, validate
from tests.runtime.plans import make_plan, write_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_base_plan_is_valid():
    p = parse_plan(make_plan())
    validate(p, 4)
    assert p.parallelism.world_size == 4 and len(p.stages) == 2


BAD = [
    ("world", make_plan(), 8, "WORLD_SIZE=8"),
    ("tp heads", make_plan(stages=[(0, 7)], pp=1, dp=1, tp=4, num_micro_batches=8,
                           model={"num_kv_heads": 2}), 4, "num_kv_heads=2 is not divisible by parallelism.tp=4"),
    ("tp ffn", make_plan(stages=[(0, 7)], pp=1, dp=2, tp=2, model={"ffn_hidden_size": 127}), 4,
     "ffn_hidden_size=127"),
    ("gap", make_plan(stages=[(0, 2), (4, 7)]), 4, "contiguously"),
    ("short", make_plan(stages=[(0, 3), (4, 6)]), 4, "num_layers=8"),
    ("batch", make_plan(num_micro_batches=3), 4, "global_batch_size=8"),
    ("stage count", make_plan(vpp=2, schedule="interleaved"), 4, "len(stages)=2 != pp*vpp"),
    ("cp", make_plan(stages=[(0, 7)], pp=1, dp=2, cp=2), 4, "not supported by the runtime yet"),
    ("schedule", make_plan(schedule="zb"), 4, "parallelism.schedule: unknown value 'zb'"),
    ("recompute layers", make_plan(stages=[(0, 3, 5), (4, 7)]), 4, "recompute_layers=5"),
    # a stage of no block: only the first (embedding) or the last (head and loss)
    ("empty middle", make_plan(stages=[(0, 3), (4, 3), (4, 7), (8, 7)], pp=2, vpp=2, schedule="interleaved"), 4,
     "stages[1].layers=[4, 3]"),
]


@pytest.mark.parametrize("model,field", [
    ({"head_dim": 32}, "model.head_dim=32"),  # 4 heads x 32 != 64
    ({"qk_norm": True}, "model.qk_norm"),
    ({"sliding_window": 16}, "model.sliding_window"),
    ({"sliding_window": 16, "layer_types": ["full_attention"] * 7 + ["sliding_attention"]}, "model.sliding_window"),
    ({"attention_chunk_size": 16, "layer_types": ["chunked_attention"] * 8}, "model.attention_chunk_size"),
    ({"block_norms": 4}, "model.block_norms=4"),
    ({"mla": {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 16}}, "model.mla"),
])
def test_architecture_the_runtime_does_not_build_is_refused(model, field):
    with pytest.raises(PlanError, match=field.replace(".", r"\.")):
        parse_plan(make_plan(model=model))
    parse_plan(make_plan(model={"head_dim": 16}))  # 4 heads x 16 = 64: the runtime's own width
    # a window beside blocks that are all full attention builds full attention
    parse_plan(make_plan(model={"sliding_window": 16, "layer_types": ["full_attention"] * 8}))


def test_empty_end_stages_accepted():
    p = parse_plan(make_plan(stages=[(0, -1), (0, 3), (4, 7), (8, 7)], pp=2, vpp=2, schedule="interleaved"))
    validate(p, 4)
    assert [s.num_layers for s in p.stages] == [0, 4, 4, 0]


@pytest.mark.parametrize("name,doc,world,msg", BAD, ids=[b[0] for b in BAD])
def test_bad_plans_raise(name, doc, world, msg):
    with pytest.raises(PlanError) as exc:
        validate(parse_plan(doc), world)
    assert msg in str(exc.value)


@pytest.mark.parametrize("par,msg", [
    ({"tp": "2"}, "parallelism.tp: must be an integer, got str '2'"),
    ({"tp": 2.0}, "parallelism.tp: must be an integer, got float 2.0"),
    ({"dp": 0}, "parallelism.dp: must be in 1..1048576, got 0"),
    ({"zero": 5}, "parallelism.zero: must be in 0..3, got 5"),
    ({"recompute": "some"}, "parallelism.recompute: unknown value 'some' (allowed: ['none', 'selective', 'full'])"),
    ({"sequence_parallel": "yes"}, "parallelism.sequence_parallel: must be true or false, got str 'yes'"),
])
def test_parallelism_field_refused_by_name(par, msg):
    with pytest.raises(PlanError) as exc:
        parse_plan(make_plan(**par))
    assert msg in str(exc.value)


def test_parallelism_is_the_plans_type():
    # null means the default and a key the Plan does not define is ignored, as a hand-written plan.json may have
    p = parse_plan(make_plan(cp=None, stage_layers=[4, 4], unknown_key=1))
    assert isinstance(p.parallelism, ParallelConfig)
    assert (p.parallelism.cp, p.parallelism.stage_layers) == (1, (4, 4))
    assert (p.parallelism.world_size, p.parallelism.dense_dp_size, p.parallelism.global_batch_size) == (4, 2, 8)


@pytest.mark.parametrize("training,msg", [
    ({"seq_length": "32"}, "training.seq_length: must be an integer, got str '32'"),
    ({"global_batch_size": 0}, "training.global_batch_size must be >= 1, got 0"),
    ({"global_batch_size": None}, "training.global_batch_size: is required"),
    ({"dtype": 16}, "training.dtype: must be a string, got int 16"),
])
def test_training_field_refused_by_name(training, msg):
    with pytest.raises(PlanError) as exc:
        parse_plan(make_plan(training=training))
    assert msg in str(exc.value)


def test_training_is_the_plans_type():
    doc = make_plan(training={"optimizer": None})
    del doc["training"]["dtype"]
    t = parse_plan(doc).training
    # left out or null: the default of the cost model that priced the plan
    assert isinstance(t, TrainingEcho) and (t.dtype, t.optimizer) == ("bf16", "adam")


def test_missing_field_named():
    doc = make_plan()
    del doc["model"]["hidden_size"]
    with pytest.raises(PlanError, match="model.hidden_size"):
        parse_plan(doc)


@pytest.mark.parametrize("name,doc,world,msg", [BAD[0], BAD[3], BAD[7]], ids=["world", "gap", "cp"])
def test_cli_exits_2_before_process_group(tmp_path, name, doc, world, msg):
    """Run as rank 0 of a world whose other ranks never come: if the runtime reached
    init_process_group it would block at the rendezvous, so a quick exit 2 proves the
    plan was refused first."""
    path = write_plan(tmp_path, doc)
    env = dict(os.environ, WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0",
               MASTER_ADDR="127.0.0.1", MASTER_PORT="1", OMP_NUM_THREADS="1")
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "planner.runtime", "--plan", str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr
    assert "error: plan not runnable" in r.stderr
    assert time.monotonic() - t0 < 30


def test_cli_unreadable_plan(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "planner.runtime", "--plan", str(tmp_path / "nope.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2 and "cannot read plan file" in r.stderr


def test_runtime_package_imports_without_torch():
    code = "import sys, planner, planner.runtime; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_scale_down_keeps_degrees_and_stage_shape():
    big = make_plan(
        stages=[(0, 9, 4), (10, 39, 0), (40, 69, 30), (70, 79, 0)],
        pp=4, dp=2, tp=4, num_micro_batches=16, sequence_parallel=True, recompute="full",
        model={"num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
               "num_kv_heads": 8, "ffn_hidden_size": 28672, "vocab_size": 128256},
        training={"global_batch_size": 512, "seq_length": 8192, "dtype": "bf16"},
        micro_batch_size=16, stage_layers=[10, 30, 30, 10],
    )
    p = parse_plan(big)
    validate(p, 32)
    s = scale_down(p)
    validate(s, 32)
    par = s.parallelism
    assert (par.pp, par.dp, par.tp, par.vpp, par.schedule, par.num_micro_batches) == (4, 2, 4, 1, "1f1b", 16)
    sizes = [st.num_layers for st in s.stages]
    # f = 80 // (2*4) = 10 -> ceil(n/10): uneven stays uneven, each >= 1.
    assert sizes == [1, 3, 3, 1]
    assert [st.recompute_layers for st in s.stages] == [1, 0, 3, 0]
    # the layout's own split follows where the plan gave one
    assert (par.stage_layers, par.recompute_layers, par.micro_batch_size) == ((1, 3, 3, 1), None, 1)
    assert s.model.num_attention_heads % par.tp == 0 and s.model.num_kv_heads % par.tp == 0
    assert s.model.num_attention_heads // s.model.num_kv_heads == 2  # GQA stays GQA
    assert s.model.hidden_size <= 64 and s.training.seq_length % par.tp == 0
