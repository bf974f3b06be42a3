"""Rank -> parallel group assignment, following Megatron-LM's RankGenerator.

Megatron (megatron/core/parallel_state.py) builds two generators over the same world:
  * the dense one, order tp-cp-ep-dp-pp with ep=1: rank = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i)),
    giving the tp, cp, dp and pp groups;
  * the expert one (MoE parallel folding), order tp-ep-dp-pp with sizes
    (etp, ep, edp = tp*cp*dp/(ep*etp), pp) over the same world: expert-TP, EP and expert-DP
    groups fold over the tp x cp x dp ranks of one pipeline stage
    (parallel_state.py initialize_model_parallel, expert_decoder_rank_generator, at
    NVIDIA/Megatron-LM d98e8a64ddf3).
A group of kind X holds the ranks that differ only in X's coordinate; groups are listed with
the remaining coordinates enumerated first-dimension-fastest, as
generate_masked_orthogonal_rank_groups does.
"""

from __future__ import annotations

from math import prod

from planner.launch._common import par

ORDER = "tp-cp-ep-dp-pp"
MAX_LISTED_WORLD = 4096
SAMPLE_GROUPS = 4


def _decompose(index: int, shape: list[int]) -> list[int]:
    out = []
    for s in shape:
        out.append(index % s)
        index //= s
    return out


def _groups(sizes: list[int], mask: list[bool], limit: int | None = None) -> tuple[int, list[list[int]]]:
    """(number of groups, groups) for the masked dims of a first-dim-fastest mesh."""
    stride = [prod(sizes[:i]) for i in range(len(sizes))]
    in_shape = [s for s, m in zip(sizes, mask, strict=True) if m]
    in_stride = [d for d, m in zip(stride, mask, strict=True) if m]
    out_shape = [s for s, m in zip(sizes, mask, strict=True) if not m]
    out_stride = [d for d, m in zip(stride, mask, strict=True) if not m]
    size = prod(in_shape)
    count = prod(sizes) // size
    groups = []
    for g in range(count if limit is None else min(limit, count)):
        base = sum(i * d for i, d in zip(_decompose(g, out_shape), out_stride, strict=True))
        groups.append([base + sum(i * d for i, d in zip(_decompose(r, in_shape), in_stride, strict=True)) for r in range(size)])
    return count, groups


def _specs(plan: dict) -> dict[str, tuple[list[int], list[bool]]]:
    p = par(plan)
    tp, cp, dp, pp, ep = p["tp"], p["cp"], p["dp"], p["pp"], p["ep"]
    dense = [tp, cp, dp, pp]  # tp-cp-dp-pp (ep=1 in the dense generator)
    specs = {
        "tp": (dense, [True, False, False, False]),
        "cp": (dense, [False, True, False, False]),
        "dp": (dense, [False, False, True, False]),
        "pp": (dense, [False, False, False, True]),
    }
    replicas = int(p.get("dp_replicate", 1))
    if replicas > 1 and dp % replicas == 0:
        # hybrid sharding: the shard group (dp/R x cp ranks: torchtitan's dp_shard_cp mesh,
        # Megatron's intra-instance group) and the replica group (R ranks: torchtitan's
        # dp_replicate mesh, Megatron's inter-instance group)
        hybrid = [tp, cp, dp // replicas, replicas, pp]
        specs["dp_shard"] = (hybrid, [False, True, True, False, False])
        specs["dp_replicate"] = (hybrid, [False, False, False, True, False])
    etp = p["etp"]
    if (ep > 1 or etp > 1) and (tp * cp * dp) % (ep * etp) == 0:
        expert = [etp, ep, tp * cp * dp // (ep * etp), pp]  # etp-ep-edp-pp
        specs["etp"] = (expert, [True, False, False, False])
        specs["ep"] = (expert, [False, True, False, False])
        specs["edp"] = (expert, [False, False, True, False])
    else:
        specs["ep"] = (dense, [False, False, False, False])  # one rank per group: no EP
    return specs


def emit(plan: dict) -> dict:
    p = par(plan)
    world = p["tp"] * p["cp"] * p["dp"] * p["pp"]
    huge = world > MAX_LISTED_WORLD
    out: dict = {
        "order": ORDER,
        "world_size": world,
        "mesh": {"pp": p["pp"], "dp": p["dp"], "cp": p["cp"], "tp": p["tp"], "ep": p["ep"], "etp": p["etp"],
                 "dp_replicate": int(p.get("dp_replicate", 1))},
        "groups": {},
    }
    for kind, (sizes, mask) in _specs(plan).items():
        count, groups = _groups(sizes, mask, SAMPLE_GROUPS if huge else None)
        if huge:
            out.setdefault("group_counts", {})[kind] = count
        out["groups"][kind] = groups
    etp = p["etp"]
    if (p["ep"] > 1 or etp > 1) and "edp" not in out["groups"]:
        out["notes"] = [f"ep*etp={p['ep'] * etp} does not divide tp*cp*dp={p['tp'] * p['cp'] * p['dp']}: "
                        "no expert groups"]
    if huge:
        out["truncated"] = True
        out["rule"] = (
            "rank = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i)); a group of kind X varies X's index "
            "with the others fixed; etp/ep/edp use rank = etp_i + etp*(ep_i + ep*(edp_i + edp*pp_i)) "
            "with edp = tp*cp*dp/(ep*etp); with dp_replicate = R, dp_i = shard_i + (dp/R)*replica_i (dp_shard "
            "groups vary cp_i and shard_i, dp_replicate groups replica_i). Only the first 4 groups of each kind "
            "are listed."
        )
    return out
