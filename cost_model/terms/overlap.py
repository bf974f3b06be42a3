"""The overlap rule: what communication run alongside compute exposes (the excess over the
compute plus an interference share of the hidden part), and the data-parallel window of a
pipeline rank's last backwards. The linear pieces are what the planner's ILP and bounds use.
"""

from __future__ import annotations


def overlapped_s(comm_s: float, compute_s: float, interference: float) -> float:
    """The overlap rule: exposed time of `comm_s` run alongside `compute_s`, the excess over
    the compute plus `interference` x the hidden part. Equal to the convex
    max(comm - overlap_window_s(compute), overlap_hidden_s(comm)), the linear pieces that
    the planner's ILP and bounds use."""
    return max(0.0, comm_s - compute_s) + interference * min(comm_s, compute_s)


def dp_window_factor(pp: int, vpp: int) -> float:
    """How many backwards of one micro-batch through a rank's layers hide that rank's
    data-parallel gradient sync. 1F1B: the last micro-batch's backward (bucketed reduction
    as in PyTorch DDP, Li et al. VLDB'20; Megatron --overlap-grad-reduce). Interleaved 1F1B:
    a chunk's buckets are reduced when its own last backward ends (megatron/core/distributed/
    param_and_grad_buffer.py register_grad_ready; schedules.py
    forward_backward_pipelining_with_interleaving), and chunk k of vpp then still has
    (vpp-1-k) x pp cooldown backwards of later chunks to run under: 1 + (pp-1)(vpp-1)/vpp
    on average over the chunks."""
    return 1.0 + (pp - 1) * (vpp - 1) / vpp if vpp > 1 else 1.0


def overlap_window_s(compute_s: float, interference: float) -> float:
    """The communication that `compute_s` of compute hides for free (overlapped_s)."""
    return (1 - interference) * compute_s


def overlap_hidden_s(comm_s: float, interference: float) -> float:
    """What `comm_s` costs even when wholly hidden: the interference share (overlapped_s)."""
    return interference * comm_s
