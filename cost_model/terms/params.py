"""A block's parameters on one GPU: the dense part split over TP (less what every TP rank
replicates), the routed experts over EP x ETP (Megatron-Core MoE parallel folding), and each
block's kind.
"""

from __future__ import annotations

from functools import lru_cache

from cost_model.model import attention, flops
from cost_model.specs.inputs import ParallelConfig, TransformerSpec


def tp_split_params(m: TransformerSpec, params: float, tp: int) -> float:
    """One TP rank's share of a block's dense parameters: the TP-split ones / tp plus the
    ones every TP rank holds whole (attention.tp_replicated_params: MLA down projections,
    latent norms, QK-norm) and, in MoE blocks, the router (Megatron TopKRouter keeps its
    E x h weight whole on every rank)."""
    rep = param_counts(m, False)[3]
    return (params - rep) / tp + rep


@lru_cache(maxsize=256)
def param_counts(m: TransformerSpec, moe_layer: bool) -> tuple[float, float, float, float]:
    """(block params, block params without routed experts, one routed expert's params, TP-
    replicated attention params) of one block kind: pure functions of the model, cached
    because the planner builds thousands of tables of one model."""
    if not moe_layer:
        return flops.block_params(m, False), 0.0, 0.0, attention.tp_replicated_params(m)
    all_but_routed = flops.block_params(m, True, experts=0)
    routed_each = flops.block_params(m, True, experts=1) - all_but_routed
    return 0.0, all_but_routed, routed_each, attention.tp_replicated_params(m)


def block_params(m: TransformerSpec, cfg: ParallelConfig, moe_layer: bool) -> tuple[float, float]:
    """(dense, expert) parameters of one block on one GPU: TP splits the dense part (less
    what every TP rank replicates), the routed experts are split num_experts/ep per EP rank
    and each expert's matrices over etp (MoE parallel folding); shared experts are dense
    (TP-split)."""
    if not moe_layer:
        return tp_split_params(m, param_counts(m, False)[0], cfg.tp), 0.0
    e = m.moe
    local_experts = max(1, e.num_experts // cfg.ep)
    _, all_but_routed, routed_each, _ = param_counts(m, True)
    router = m.hidden_size * e.num_experts + (e.num_experts if e.router_bias else 0)
    dense = tp_split_params(m, all_but_routed - router, cfg.tp) + router
    return dense, routed_each * local_experts / cfg.etp


@lru_cache(maxsize=64)
def block_keys(model: TransformerSpec) -> tuple[tuple[bool, int | None], ...]:
    """Each block's kind: blocks differ by MoE-ness and by their attention window (sliding /
    chunked layers). A function of the model alone, read by every layer table of a search
    (thousands): computed once."""
    return tuple((model.moe is not None and model.moe.is_moe_layer(i), attention.window(model, i))
                 for i in range(model.num_layers))
