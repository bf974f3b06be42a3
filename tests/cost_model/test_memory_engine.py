"""Memory as the engine holds it (cost_model/memory.py): communicators counted from the
degrees, fixed overheads from their stated sizes, the loss transient beside the block's
working set or inside its cached segments."""

from __future__ import annotations

import pytest

from cost_model import memory, transients
from cost_model.specs import ParallelConfig, TrainingSpec, TransformerSpec

MIB = 2**20
LLAMA8B = TransformerSpec(name="llama3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                          ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu")


def test_communicators_from_the_degrees():
    # world + tp + dp + pp prev/next
    assert memory.communicators(ParallelConfig(tp=8, pp=4, dp=2)) == 1 + 1 + 1 + 2
    # + cp, and the dp x cp group Megatron reduces dense gradients over
    assert memory.communicators(ParallelConfig(tp=2, cp=2, dp=4)) == 1 + 1 + 1 + 1 + 1
    assert memory.communicators(ParallelConfig()) == 1


def test_reserved_is_context_workspace_and_nccl_buffers():
    cfg = ParallelConfig(tp=8, dp=4)
    n = memory.communicators(cfg)
    expected = 500 * MIB + 32 * MIB + n * 16 * 2 * 4 * MIB  # context, cuBLAS sm90 :4096:8, NCCL_BUFFSIZE x ch x 2
    assert memory.reserved_bytes(cfg) == expected


def test_engine_state_bytes_megatron_and_fsdp2():
    t = TrainingSpec(global_batch_size=8, seq_length=2048)
    assert memory.state_bytes_per_param(t, "megatron", 1, 8).total == pytest.approx(6 + 12 / 8)
    assert memory.state_bytes_per_param(t, "megatron", 0, 8).total == pytest.approx(18)
    assert memory.state_bytes_per_param(t, "torchtitan", 3, 8).total == pytest.approx(16 / 8)
    # a mode the engine lacks is priced as ZeRO states it (torchtitan has no ZeRO-1)
    assert memory.state_bytes_per_param(t, "torchtitan", 1, 8) == memory.model_state_bytes_per_param(t, 1, 8)


def test_loss_beside_or_inside_the_cached_segments():
    """128K-vocabulary fp32 logits (8 GiB at 16K tokens) cannot reuse a block's ~0.5 GiB
    MLP segments: the loss is reserved beside them. Eager 2K-token attention scores of a
    large-head model are larger than the logits: the loss reuses them."""
    t = TrainingSpec(global_batch_size=8, seq_length=8192)
    cfg = ParallelConfig(dp=8, zero=3, micro_batch_size=2, engine="torchtitan")
    assert memory.loss_reserved_bytes(LLAMA8B, t, cfg, 10.0, 4.0) == 10.0
    gpt = TransformerSpec(name="gpt-530b", num_layers=4, hidden_size=20480, num_attention_heads=160, num_kv_heads=160, ffn_hidden_size=81920,
                          vocab_size=51200)
    te = TrainingSpec(global_batch_size=8, seq_length=2048, attention="eager")
    cfg = ParallelConfig(dp=8, zero=3, micro_batch_size=4, engine="deepspeed")
    assert memory.loss_reserved_bytes(gpt, te, cfg, 10.0, 4.0) == 6.0


def test_torchtitan_selective_is_op_sac():
    t = TrainingSpec(global_batch_size=8, seq_length=8192)
    mg = memory.block_activation_bytes(LLAMA8B, t, 2, 1, 1, False, False, "megatron")
    tt = memory.block_activation_bytes(LLAMA8B, t, 2, 1, 1, False, False, "torchtitan")
    sac = transients.torchtitan_op_sac_block_bytes(16384, 4096, 1024, 14336, 32)
    assert tt.selective == pytest.approx(sac) and tt.selective < 0.5 * mg.selective
    assert (tt.none, tt.full) == (mg.none, mg.full)
