"""What every picture needs from a plan: the JSON shape (a dict, or an object with
`model_dump` such as a pydantic Plan), and short labels for a configuration."""

from __future__ import annotations

from typing import Any

from cost_model.specs.vocab import ACT_OFFLOAD_NONE, DISPATCHER_ALLTOALL, RECOMPUTE_NONE


def as_dict(plan: Any) -> dict:
    if isinstance(plan, dict):
        return plan
    if hasattr(plan, "model_dump"):
        return plan.model_dump(mode="json")
    if hasattr(plan, "to_dict"):
        return plan.to_dict()
    raise TypeError(f"expected a plan dict or model, got {type(plan).__name__}")


def degrees(par: dict) -> str:
    """'dp8 tp2 pp4 cp2' plus the non-default knobs, in the order DESIGN.md lists them."""
    out = [f"dp{par.get('dp', 1)}", f"tp{par.get('tp', 1)}", f"pp{par.get('pp', 1)}"]
    for k in ("cp", "ep", "vpp"):
        if par.get(k, 1) > 1:
            out.append(f"{k}{par[k]}")
    return " ".join(out)


def knobs(par: dict) -> str:
    out = [f"mb{par.get('micro_batch_size', 1)}"]
    if par.get("sequence_parallel"):
        out.append("sp")
    if par.get("cp_comm") and par.get("cp", 1) > 1:
        out.append(f"cp:{par['cp_comm']}")
    if par.get("zero"):
        out.append(f"zero{par['zero']}")
    if par.get("recompute", RECOMPUTE_NONE) != RECOMPUTE_NONE:
        out.append(f"rc:{par['recompute']}")
    if par.get("moe_a2a_overlap"):
        out.append("a2a-overlap")
    if par.get("moe_dispatcher") and par["moe_dispatcher"] != DISPATCHER_ALLTOALL:
        out.append(f"ep:{par['moe_dispatcher']}")
    if par.get("activation_offload", ACT_OFFLOAD_NONE) != ACT_OFFLOAD_NONE:
        out.append(f"act-offload:{par['activation_offload']}")
    if par.get("cpu_offload_layers"):
        out.append(f"cpu-offload-layers:{par['cpu_offload_layers']}")
    out.append(str(par.get("schedule", "")))
    return " ".join(out)


def fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    return f"{s * 1e3:.3g} ms"
