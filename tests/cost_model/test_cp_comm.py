"""Context-parallel communication variants (Megatron-Core --cp-comm-type): the rules the
validator and the search take from Transformer Engine, the hierarchical split the emitter
writes, and the variants priced apart."""

from __future__ import annotations

import pytest

from cost_model.estimate import estimate
from cost_model.model import attention
from cost_model.model.presets import get_preset
from cost_model.specs.errors import SpecError
from cost_model.terms.activations import block_working_set_bytes
from planner.request.parse import parse_cluster, parse_model, parse_parallelism, parse_training

L8B, L70B, DSV3 = get_preset("llama3-8b"), get_preset("llama3-70b"), get_preset("deepseek-v3")


@pytest.mark.parametrize(("model", "tp", "cp", "sizes"), [
    # Llama 3 70B: 64 q / 8 k-v heads. tp 2: 4 k-v heads per rank; a2a size <= 8 // 2 = 4 and | 4
    (L70B, 2, 8, (4, 2)),
    # tp 8: one k-v head per rank, which no all-to-all splits: no a2a level
    (L70B, 8, 4, (1, 4)),
    # tp 1, cp 16: a2a size 8 (the NVLink domain), ring of 2
    (L8B, 1, 16, (8, 2)),
    # DeepSeek-V3 (MLA: k and v have the 128 query heads): tp 2, cp 8 -> 4 x 2
    (DSV3, 2, 8, (4, 2)),
])
def test_hierarchical_sizes_hand_count(model, tp, cp, sizes):
    assert attention.a2a_p2p_sizes(model, tp, cp) == sizes
    inner, outer = sizes
    assert inner * outer == cp


def test_a2a_heads_rule_is_transformer_engines():
    """AttnFuncWithCPAndQKVOA2A asserts q.shape[-2] % cp == 0 and k.shape[-2] % cp == 0."""
    assert attention.cp_comm_error(L8B, 1, 8, "a2a") is None  # 32 q, 8 k-v heads over 8
    why = attention.cp_comm_error(L8B, 4, 4, "a2a")  # 8 q, 2 k-v heads per rank over 4
    assert "q 8, k/v 2" in why and "divisible by 4" in why and "AttnFuncWithCPAndQKVOA2A" in why
    assert attention.cp_comm_error(L8B, 8, 4, "p2p") is None and attention.cp_comm_error(L8B, 8, 4, "all_gather") is None
    # a2a+p2p always runs (its a2a level is taken where the heads split); the search leaves
    # out the splits with a level of one rank, plain p2p or a2a under another name
    assert attention.cp_comm_error(L70B, 8, 4, "a2a+p2p") is None
    assert attention.cp_comm_redundant(L70B, 8, 4, "a2a+p2p")  # no a2a level (above)
    assert attention.cp_comm_redundant(L8B, 1, 8, "a2a+p2p")  # all 8 in one a2a: that is a2a
    assert not attention.cp_comm_redundant(L8B, 1, 16, "a2a+p2p")


def test_sliding_window_and_sink_rules_are_transformer_engines():
    """attn_forward_func_with_cp: a sliding window only with a2a or all_gather, sinks
    (softmax_type 'learnable') only with a2a. GPT-OSS has both (a2a alone runs), Gemma 3 the
    window (all_gather or a2a); a plain model keeps every variant; the search's unpinned
    choice falls from the default ring to the first variant the model runs."""
    from planner.space import SearchSpace, cp_comm_values

    oss, gemma = get_preset("gpt-oss-120b"), get_preset("gemma3-27b")
    why = attention.cp_comm_error(oss, 1, 8, "p2p")
    assert "sliding window" in why and "'p2p'" in why and "context_parallel.py" in why
    assert "softmax_type='learnable'" in attention.cp_comm_error(oss, 1, 8, "all_gather")
    assert attention.cp_comm_error(oss, 1, 8, "a2a") is None  # 64 q, 8 k-v heads over 8
    assert "sliding window" in attention.cp_comm_error(oss, 1, 8, "a2a+p2p")
    assert attention.cp_comm_error(gemma, 1, 2, "all_gather") is None
    assert "sliding window" in attention.cp_comm_error(gemma, 1, 2, "p2p")
    assert attention.cp_comm_error(L8B, 1, 8, "p2p") is None
    space = SearchSpace()
    assert cp_comm_values(oss, space, "megatron", 1, 8) == ["a2a"]
    assert cp_comm_values(gemma, space, "megatron", 1, 2) == ["all_gather"]
    assert cp_comm_values(L8B, space, "megatron", 1, 8) == ["p2p"]
    with pytest.raises(SpecError) as exc:
        _est("megatron", "p2p", tp=1, cp=8, model="gpt-oss-120b")
    assert exc.value.field == "parallelism.cp_comm" and exc.value.allowed == ["a2a"]


def _est(engine: str, cp_comm: str | None, tp: int = 1, cp: int = 16, model: str = "llama3-8b"):
    m = parse_model({"name": model})
    cl = parse_cluster({"gpu": "h100-sxm", "num_gpus": 16})
    t = parse_training({"global_batch_size": 2, "seq_length": 65536})
    p = parse_parallelism({"tp": tp, "cp": cp, "dp": 16 // (tp * cp), "engine": engine, "cp_comm": cp_comm,
                           "recompute": "full", "zero": 1 if engine == "megatron" else 3})
    return estimate(m, cl, t, p)


def test_estimate_refuses_a_variant_the_engine_lacks():
    with pytest.raises(SpecError) as exc:
        _est("torchtitan", "a2a")
    assert exc.value.field == "parallelism.cp_comm" and "torchtitan context parallelism is p2p" in exc.value.message
    with pytest.raises(SpecError) as exc:
        _est("megatron", "a2a", tp=4, cp=4)
    assert exc.value.field == "parallelism.cp_comm"
    assert exc.value.allowed == ["p2p", "all_gather", "a2a+p2p"]  # a2a+p2p: a2a of 2 (2 k-v heads), ring of 2
    # the engine's default when unset: Megatron's and torchtitan's ring is p2p
    assert _est("megatron", None).prediction == _est("megatron", "p2p").prediction


def test_variants_are_priced_apart():
    """Each variant moves its own bytes at the 65K x 16-way split of Llama 2 7B (32 heads, no
    GQA: all four run): the ring's sends hide under the attention steps, the all-to-alls of
    q, k, v and the output do not."""
    times = {v: _est("megatron", v, model="llama2-7b").prediction.step_time_s
             for v in ("p2p", "all_gather", "a2a", "a2a+p2p")}
    assert len({round(x, 9) for x in times.values()}) == 4, times
    assert all(x > 0 for x in times.values())


def test_all_gather_backward_holds_the_full_sequence_kv():
    """Transformer Engine's all-gather CP backward holds the whole sequence's K/V (gathered,
    and the step's contiguous range) and full-length dK/dV (the accumulator and the step's):
    4 x cp x the local K/V. Llama 2 7B at 65K over cp 16, 4096 tokens per rank, bf16: K/V
    per token 2 x 32 x 128 = 8192, so 4 x 16 x 4096 x 8192 x 2 B = 4 GiB, plus the local
    dq, dk, dv, do (4096 x (8192 + 32 x 256) x 2 B = 128 MiB), against the MLP's gradients
    (4096 x (2 x 4096 + 3 x 11008) x 2 B = 322 MiB), the working set's point without CP."""
    from cost_model.specs.inputs import ParallelConfig, TrainingSpec

    m = get_preset("llama2-7b")
    t = TrainingSpec(global_batch_size=16, seq_length=65536)
    tokens = 4096
    mlp = tokens * (2 * 4096 + 3 * 11008) * 2
    attn = (4 * 16 * tokens * 8192 + tokens * (8192 + 32 * 256)) * 2
    # the ring: 4 local K/V chunks beside the local gradients, 384 MiB, just above the MLP's
    ring = (4 * tokens * 8192 + tokens * (8192 + 32 * 256)) * 2
    assert ring > mlp
    for kind, want in (("all_gather", attn), ("p2p", ring)):
        cfg = ParallelConfig(cp=16, cp_comm=kind)
        assert block_working_set_bytes(m, t, cfg, False, 0.0) == pytest.approx(want, rel=1e-12)
    assert attn / 2**30 == pytest.approx(4.125)
    peaks = {v: _est("megatron", v, model="llama2-7b").prediction.memory.peak_gib for v in ("p2p", "all_gather")}
    assert peaks["all_gather"] - peaks["p2p"] >= (attn - ring) / 2**30
