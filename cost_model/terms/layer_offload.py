"""Layer-level activation offload (ParallelConfig.cpu_offload_layers): what Megatron-Core's
cpu_offloading of the first N of L dense blocks frees on the GPU, puts in host memory and costs
in time, as Transformer Engine's cpu_offload.py runs it (engines/offload.py says where each
rule was read).

Per offloaded block and micro-batch on one GPU:
- copied: every tensor the block saves for backward with at least 2**20 elements
  (LAYER_OFFLOAD_MIN_ELEMENTS), itemised by dense_block_saved_tensors (the Korthikanti et al.
  2022 §4.1 terms of activations.block_activation_bytes, one by one);
- kept on the GPU: the smaller tensors, FlashAttention's fp32 logsumexp (counted as kept even
  where it passes the threshold: never under-stated) and a clamped GLU's extra copies;
- host memory: the copies of one micro-batch (pp 1: one in flight; freed once reloaded).

Memory: the engine frees block i's copies before the forward of block L-N+i and reloads them
from the backward of block L-1-N+i on, so its saved activations peak at (L-N) blocks' worth
(cpu_offload.py _default_offload_sync_init). Counting each non-offloaded block whole and each
offloaded block at its kept bytes gives exactly that peak: at every moment the engine holds
L-N blocks' copied tensors, be they never offloaded or reloaded.

Time (the overlap model): the copies run on one side stream, serially, at the GPU's share of
the host path (act_offload.host_path_b_s), c seconds per block each way. Block i's copy starts
when its forward ends and must be done before the forward of block L-N+i starts (the compute
stream waits for it): a window of L-N-1 blocks' forward, f seconds each. The longest path
through the compute and copy chains gives the forward's wait per micro-batch: with L-N >= 2,
max(0, N c - (L-2) f) (one run of all N copies, the last ending at f + N c where c >= f and
due at (L-1) f; where c < f a copy always ends within its window); with N = L-1 no window,
and each copy delays the next block by c: N c. The reloads mirror it in the backward with b
seconds per block (block i's reload starts before the backward of block L-1-N+i, so L-N-1
blocks' backward run before block i's, which waits for it). The copy of a block's first
tensors may start before its forward ends (per-tensor events): not counted, so the wait is
never under-stated. The wait is spread evenly over the N offloaded blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.engines.offload import LAYER_OFFLOAD_MIN_ELEMENTS
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.specs.vocab import MLP_SWIGLU
from cost_model.terms.act_offload import host_path_b_s
from cost_model.terms.activations import (
    SavedTensor,
    activation_dtype_bytes,
    attention_saved_tensors,
    glu_clamp_bytes,
    saved_gemm_input_bytes,
)

FLASH_LSE_BYTES = 4.0  # FlashAttention's fp32 logsumexp per head and token (activations.block_activation_bytes)


@dataclass(frozen=True)
class LayerOffload:
    """One offloaded block's layer-level offload for one micro-batch on one GPU."""

    copied_bytes: float = 0.0  # leave the GPU, cross the host path each way, sit in host memory
    kept_bytes: float = 0.0  # the block's saved bytes that stay on the GPU
    fwd_exposed_s: float = 0.0  # this block's share of the forward's wait on the copies
    bwd_exposed_s: float = 0.0  # this block's share of the backward's wait on the reloads


def dense_block_saved_tensors(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig) -> dict[str, SavedTensor]:
    """A dense flash-attention block's saved tensors, one by one (Korthikanti et al. 2022 §4.1;
    the same terms and sharding as activations.block_activation_bytes, whose `none` they sum
    to with FlashAttention's logsumexp and a clamped GLU's copies): the attention's
    (attention_saved_tensors), the pre-MLP norm's input and fc1's input (split by tp only with
    sequence parallelism), the two residual dropout masks (1 byte, with dropout), fc1's output
    (2f wide gated) and fc2's input, split by tp."""
    dt = activation_dtype_bytes(t)
    gin = saved_gemm_input_bytes(t, cfg.engine, dt)
    sb = t.seq_length / cfg.cp * cfg.micro_batch_size
    rep = float(cfg.tp) if cfg.sequence_parallel else 1.0
    h, f, tp = m.hidden_size, m.ffn_hidden_size, cfg.tp
    out = attention_saved_tensors(m, t, cfg.micro_batch_size, tp, cfg.cp, cfg.sequence_parallel, cfg.engine)

    def tensor(name: str, width: float, nbytes: float, split: float) -> None:
        out[name] = SavedTensor(name, nbytes * sb * width / split, sb * width / split)

    tensor("mlp_norm_input", h, dt, rep)
    tensor("fc1_input", h, gin, rep)
    if m.dropout:
        tensor("attn_dropout_mask", h, 1.0, rep)
        tensor("mlp_dropout_mask", h, 1.0, rep)
    tensor("fc1_output", (2 if m.mlp == MLP_SWIGLU else 1) * f, dt, tp)
    tensor("fc2_input", f, gin, tp)
    return out


def kept_extra_bytes(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig) -> float:
    """The block's saved bytes outside dense_block_saved_tensors: FlashAttention's fp32
    logsumexp per head and token and a clamped GLU's copies, split by tp."""
    sb = t.seq_length / cfg.cp * cfg.micro_batch_size
    lse = FLASH_LSE_BYTES * sb * m.num_attention_heads
    clamp = glu_clamp_bytes(m, cfg.engine, False, sb, activation_dtype_bytes(t))[0]
    return (lse + clamp) / cfg.tp


def offload_wait_s(copy_s: float, compute_s: float, offloaded: int, layers: int) -> float:
    """Per micro-batch, what one direction's copies of N = `offloaded` of L = `layers` blocks
    take beyond the compute t they overlap (module docstring): N c where N = L-1 (each copy is
    due when the next block starts, with no compute under it), else max(0, N c - (L-2) t)."""
    if offloaded == 0:
        return 0.0
    if layers - offloaded == 1:
        return offloaded * copy_s
    return max(0.0, offloaded * copy_s - (layers - 2) * compute_s)


def block_layer_offload(m: TransformerSpec, cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig,
                        index: int, fwd_s: float, bwd_s: float) -> LayerOffload | None:
    """Block `index`'s layer-level offload with each block's forward and backward compute
    `fwd_s`, `bwd_s` (per micro-batch) as the copies' overlap windows; None where the block is
    not offloaded (index >= cfg.cpu_offload_layers)."""
    n = cfg.cpu_offload_layers
    if index >= n:
        return None
    tensors = dense_block_saved_tensors(m, t, cfg).values()
    copied = sum(x.nbytes for x in tensors if x.elements >= LAYER_OFFLOAD_MIN_ELEMENTS)
    kept = sum(x.nbytes for x in tensors if x.elements < LAYER_OFFLOAD_MIN_ELEMENTS) + kept_extra_bytes(m, t, cfg)
    rate = host_path_b_s(cluster)
    copy_s = copied / rate if rate > 0 else float("inf")
    layers = m.num_layers
    return LayerOffload(copied_bytes=copied, kept_bytes=kept,
                        fwd_exposed_s=offload_wait_s(copy_s, fwd_s, n, layers) / n,
                        bwd_exposed_s=offload_wait_s(copy_s, bwd_s, n, layers) / n)
