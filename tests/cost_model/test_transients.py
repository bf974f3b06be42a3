"""cost_model.terms.transients with hand-computed numbers (Llama 3.1 8B shapes)."""

import pytest

from cost_model.terms.transients import (
    CUBLAS_WORKSPACE_PRE_SM90_BYTES,
    CUBLAS_WORKSPACE_SM90_BYTES,
    MIB,
    backward_working_set_bytes,
    block_activation_grad_bytes,
    chunked_loss_transient,
    engine_loss_impl,
    fixed_overheads_bytes,
    loss_transient_bytes,
    nccl_buffer_bytes,
    reserved_bytes,
    torchtitan_op_sac_block_bytes,
)

T, V = 2 * 8192, 128256  # local batch 2 x seq 8192 tokens, Llama 3 vocabulary
N = 2_101_346_304  # T * V by hand: 16384 * 128000 + 16384 * 256


def test_torch_cross_entropy_over_full_logits():
    lt = loss_transient_bytes(T, V, "torch")
    assert T * V == N
    assert lt.forward_peak == 10 * N  # bf16 logits + fp32 copy + fp32 log_softmax
    assert lt.backward_peak == 12 * N  # saved log_softmax + nll grad + its grad
    assert lt.peak == 25_216_155_648  # 23.48 GiB
    assert lt.extra_over_saved == 8 * N


def test_megatron_and_te_cross_entropy():
    mg = loss_transient_bytes(T, V / 8, "megatron")  # vocab-parallel over tp=8
    assert mg.peak == pytest.approx(6 * N / 8)
    te = loss_transient_bytes(T, V, "te")
    assert te.peak == 2 * N + 12 * T  # in-place gradient in the bf16 logits + 3 fp32 per row
    assert te.extra_over_saved == 0


def test_compiled_cross_entropy():
    """torch.compile of F.cross_entropy(pred.float()): the bf16 logits saved (the graph input),
    the fp32 upcast and log-softmax fused away, the bf16 gradient written in one kernel."""
    lt = loss_transient_bytes(T, V, "torch_compiled")
    assert (lt.saved, lt.forward_peak, lt.backward_peak) == (2 * N, 2 * N, 4 * N)
    assert lt.extra_over_saved == 2 * N and lt.largest_tensor == 2 * N


def test_chunked_loss_holds_one_chunk_and_the_fp32_hidden_gradient():
    """torchtitan's ChunkedLossWrapper in 8 chunks over eager CE: nothing kept for the step's
    backward, one chunk's 12 B per logit at the peak, beside the fp32 gradient of the 16384
    hidden states of 4096 (GradAccumulator dtype float32)."""
    acc = 4 * T * 4096
    lt = chunked_loss_transient(loss_transient_bytes(T, V, "torch"), 8, acc)
    assert lt.saved == 0
    assert lt.backward_peak == 12 * N / 8 + acc and lt.forward_peak == 10 * N / 8 + acc
    assert lt.peak == 3_420_454_912  # 3.19 GiB, against 23.48 GiB whole
    assert chunked_loss_transient(loss_transient_bytes(T, V, "torch"), 1, acc) == loss_transient_bytes(T, V, "torch")


def test_engine_loss_impl():
    assert engine_loss_impl("torchtitan") == "torch"
    assert engine_loss_impl("torchtitan", compiled=True) == "torch_compiled"
    assert engine_loss_impl("torchtitan", tp=8, compiled=True) == "torch_loss_parallel"
    assert engine_loss_impl("megatron", compiled=True) == "megatron"
    assert engine_loss_impl("megatron") == "megatron"
    assert engine_loss_impl("megatron", "te") == "te"
    with pytest.raises(ValueError):
        loss_transient_bytes(1, 1, "chunked")


def test_activation_grads_and_working_set_summed():
    g = block_activation_grad_bytes(8192, 4096, 14336, tp=1, sequence_parallel=False, swiglu=True)
    assert g == 2 * (2 * 8192 * 4096 + 3 * 8192 * 14336) == 838_860_800
    g_sp = block_activation_grad_bytes(8192, 4096, 14336, tp=4, sequence_parallel=True, swiglu=True)
    assert g_sp == pytest.approx(g / 4)
    p_block = 218_112_000  # 4096*(4096+2*1024+4096) + 3*4096*14336 + 2*4096
    ws = backward_working_set_bytes(g, recompute_block_bytes=1e9, block_params=p_block, gathered=True)
    assert ws.gathered_params == 2 * 2 * p_block  # this block + one prefetched, bf16
    assert ws.unsharded_grads == (2 + 4) * p_block  # bf16 grad + fp32 copy for the reduce-scatter
    assert ws.total == g + 1e9 + 4 * p_block + 6 * p_block
    assert backward_working_set_bytes(g).total == g  # nothing gathered without ZeRO-3


def test_fixed_overheads():
    assert CUBLAS_WORKSPACE_SM90_BYTES == 32 * MIB
    assert CUBLAS_WORKSPACE_PRE_SM90_BYTES == 8 * MIB + 128 * 1024
    assert nccl_buffer_bytes(3) == 3 * 16 * 2 * 4 * MIB == 384 * MIB
    fo = fixed_overheads_bytes(communicators=3)
    assert fo.in_allocator == 32 * MIB
    assert fo.total == 500 * MIB + 32 * MIB + 384 * MIB


def test_reserved():
    assert reserved_bytes(100.0, 0.05) == pytest.approx(105.0)


def test_torchtitan_op_sac_saves_every_other_matmul():
    # Llama 3.1 8B, 16384 tokens: wq 4096 + wv 1024 + w1 14336 + w2 4096 + sdpa out 4096
    # + block input 4096 bf16 elements, + 32 heads fp32 logsumexp, per token
    per_token = 2 * (4096 + 1024 + 14336 + 4096 + 4096 + 4096) + 4 * 32
    assert per_token == 63_616
    assert torchtitan_op_sac_block_bytes(16384, 4096, 1024, 14336, 32) == 16384 * per_token
    tp8 = torchtitan_op_sac_block_bytes(16384, 4096, 1024, 14336, 32, tp=8, sequence_parallel=True)
    assert tp8 == pytest.approx(16384 * per_token / 8)


def test_loss_parallel_transient_follows_torch_loss_parallel():
    """torch/distributed/tensor/parallel/loss.py: forward keeps bf16 logits, the fp32 copy,
    the shifted logits and their exp (2 + 4 + 4 + 4 bytes per element); the fused backward
    returns (zeros_like(x) + exp(x)) * grad beside the saved fp32 output: 4 fp32 tensors."""
    from cost_model.terms.transients import engine_loss_impl

    T, V = 16384, 128256 / 8
    lt = loss_transient_bytes(T, V, "torch_loss_parallel")
    assert lt.forward_peak == 14 * T * V and lt.backward_peak == 16 * T * V and lt.saved == 4 * T * V
    assert engine_loss_impl("torchtitan", tp=8) == "torch_loss_parallel"
    assert engine_loss_impl("torchtitan", tp=1) == "torch"
