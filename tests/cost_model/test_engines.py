"""cost_model.engines.support against the engines' own tables and rules.

References, restated here from the source (not from engines.py):
- Megatron-LM docs/user-guide/features/dist_optimizer.md @d98e8a6, bytes per parameter:
      fp16 params, fp16 grads: 20 | 4 + 16/d
      bf16 params, fp32 grads: 18 | 6 + 12/d
      fp32 params, fp32 grads: 16 | 8 + 8/d
- torchtitan FSDP2 (MixedPrecisionPolicy param bf16, reduce fp32; the sharded parameter is
  fp32 and is the optimizer's master): fp32 param 4 + fp32 grad 4 + Adam 8 = 16 bytes,
  sharded over dp_shard x cp: 16/d; with reshard_after_forward=never the unsharded bf16 copy
  (2 bytes) is held from forward to backward: 2 + 16/d.
- DeepSpeed engine.py: bf16 params + fp32 grad accumulation at ZeRO-1 -> BF16_Optimizer
  (full fp32 grad buffer): 6 + 12/d; pipe/engine.py: ZeRO-2/3 refused with pipelines.
"""

import pytest

from cost_model.engines.states import engine_state_bytes
from cost_model.engines.support import ENGINES, engine_supports
from cost_model.specs.vocab import Engine, values

MEGATRON_TABLE = {
    # (param dtype, grad dtype): (non-distributed, distributed as f(d))
    ("fp16", "fp16"): (20, lambda d: 4 + 16 / d),
    ("bf16", "fp32"): (18, lambda d: 6 + 12 / d),
    ("fp32", "fp32"): (16, lambda d: 8 + 8 / d),
}


@pytest.mark.parametrize("dtypes", list(MEGATRON_TABLE))
@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_megatron_distributed_optimizer_table(dtypes, d):
    """The doc's bytes are what the step holds: the states, and with 16-bit gradients the fp32
    copy of the (shard of the) gradients the optimizer makes at the step and frees at the next
    zero_grad (optimizer.py / distrib_optimizer.py _copy_model_grads_to_main_grads), counted
    apart as the step's buffer (4 bytes, or 4/d of a shard)."""
    dtype, grad = dtypes
    plain, dist = MEGATRON_TABLE[dtypes]
    s0, s1 = engine_state_bytes("megatron", 0, d, dtype, grad), engine_state_bytes("megatron", 1, d, dtype, grad)
    assert s0.total + s0.step_transient == pytest.approx(plain)
    assert s1.total + s1.step_transient == pytest.approx(dist(d))
    copy = 4.0 if grad == "fp16" else 0.0
    assert (s0.step_transient, s1.step_transient) == pytest.approx((copy, copy / d))


def test_megatron_distributed_optimizer_keeps_full_fp32_grads():
    s = engine_state_bytes("megatron", 1, 8, "bf16", "fp32")
    assert (s.weights, s.grads) == (2, 4)  # never sharded: the 6 of 6 + 12/d


@pytest.mark.parametrize("d", [1, 8, 32, 256])
def test_torchtitan_fsdp2_tables(d):
    full = engine_state_bytes("torchtitan", 3, d, "bf16", "fp32")
    assert full.total == pytest.approx(16 / d)
    assert (full.weights, full.grads, full.optimizer) == pytest.approx((4 / d, 4 / d, 8 / d))
    no_reshard = engine_state_bytes("torchtitan", 2, d, "bf16", "fp32")
    assert no_reshard.total == pytest.approx(2 + 16 / d)
    ddp = engine_state_bytes("torchtitan", 0, d, "bf16", "fp32")
    assert ddp.total == pytest.approx(16)


def test_torchtitan_has_no_zero1():
    why = engine_supports("torchtitan", zero=1)
    assert why and "ZeRO-1" in why
    with pytest.raises(ValueError):
        engine_state_bytes("torchtitan", 1, 8)


def test_fp8_keeps_bf16_params():
    assert engine_state_bytes("megatron", 1, 8, "fp8", "fp32").total == pytest.approx(6 + 12 / 8)


@pytest.mark.parametrize("d", [2, 16])
def test_deepspeed_bytes(d):
    assert engine_state_bytes("deepspeed", 1, d, "bf16", "fp32").total == pytest.approx(6 + 12 / d)
    z2 = engine_state_bytes("deepspeed", 2, d, "bf16", "bf16")
    assert z2.total == pytest.approx(2 + (2 + 12) / d)
    assert z2.step_transient == pytest.approx(4 / d)
    assert engine_state_bytes("deepspeed", 3, d, "bf16", "bf16").total == pytest.approx(16 / d)


def test_runtime_is_fp32_and_zero2_equals_zero1():
    d = 4
    z1 = engine_state_bytes("runtime", 1, d, "bf16", "fp32")
    z2 = engine_state_bytes("runtime", 2, d, "bf16", "fp32")
    assert (z1.weights, z1.grads, z1.optimizer, z1.step_transient) == (z2.weights, z2.grads, z2.optimizer, z2.step_transient)
    assert z1.total == pytest.approx(4 + 4 + 16 / d)
    assert engine_state_bytes("runtime", 0, d).total == 16


def test_every_engine_in_vocab_has_a_table_with_sources():
    assert set(ENGINES) == set(values(Engine))
    for e in ENGINES.values():
        assert e.sharding and all(m.source.path for m in e.sharding)
        assert e.loss.source.path


@pytest.mark.parametrize(
    "engine,knobs,fragment",
    [
        ("deepspeed", dict(zero=2, pp=4), "pipeline"),
        ("deepspeed", dict(zero=3, pp=2), "pipeline"),
        ("deepspeed", dict(recompute="selective"), "selective"),
        ("deepspeed", dict(pp=4, vpp=2), "interleaved"),
        ("megatron", dict(pp=4, schedule="gpipe"), "gpipe"),
        ("megatron", dict(recompute="full", recompute_layers=(4, 2, 2, 2), pp=4), "one recompute count"),
        ("megatron", dict(recompute="selective", recompute_layers=(1,)), "every layer"),
        ("torchtitan", dict(recompute="full", recompute_layers=(2, 2), stage_layers=(4, 4), pp=2), "every block"),
        ("torchtitan", dict(cp=2, cp_variant="a2a"), "ring"),
        ("torchtitan", dict(fp8=True, fp8_recipe="delayed"), "recipes"),
        ("runtime", dict(cp=2), "context parallelism"),
        ("runtime", dict(ep=2), "expert parallelism"),
        ("runtime", dict(fp8=True), "fp8"),
        ("megatron", dict(vpp=2, pp=1), "pipeline parallelism"),
    ],
)
def test_refused_with_reason(engine, knobs, fragment):
    why = engine_supports(engine, **knobs)
    assert why is not None and fragment in why


@pytest.mark.parametrize(
    "engine,knobs",
    [
        ("megatron", dict(zero=1, pp=8, vpp=4, schedule="interleaved", tp=8, sequence_parallel=True, cp=2,
                          cp_variant="a2a+p2p", recompute="full", recompute_layers=(2,) * 8, fp8=True,
                          fp8_recipe="mxfp8", ep=8, etp=1)),
        ("megatron", dict(zero=3)),
        ("torchtitan", dict(zero=3, cp=8, fp8=True, fp8_recipe="rowwise", recompute="full")),
        ("torchtitan", dict(zero=2, pp=4, schedule="gpipe")),
        ("torchtitan", dict(recompute="full", recompute_layers=(4, 4), stage_layers=(4, 4), pp=2)),
        ("deepspeed", dict(zero=1, pp=4, recompute="full", recompute_layers=(3, 3, 3, 3))),
        ("runtime", dict(zero=2, pp=2, recompute="full", recompute_layers=(3, 1), schedule="gpipe")),
    ],
)
def test_supported(engine, knobs):
    assert engine_supports(engine, **knobs) is None
