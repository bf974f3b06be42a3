"""Profile JSON <-> CalibrationProfile.

The profile file is what `planner profile` writes and `--profile FILE` / `POST /v1/profiles`
read. Pure Python (no torch), so the planner service validates profiles without the
profiler installed. Layout (schema_version 1):

    {"schema_version": 1,
     "device": "cpu",                 # catalog name the numbers describe ("h200", "cpu", ...)
     "device_name": "...", "torch_version": "...", "cuda_version": null, "dtype": "bf16",
     "source": "...",                 # free text: how / where it was measured
     "layers": [{"kind": "block", "tp": 1, "micro_batch_size": 1, "seq_length": 2048,
                 "fwd_s": ..., "bwd_s": ..., "activation_bytes": ...}, ...],
     "comm":   [{"collective": "all_reduce", "level": "intra",
                 "alpha_s": ..., "beta_s_per_byte": ..., "world_size": 2,
                 "members_per_node": 8}, ...],   # optional: the group shape measured
     "gemm":   [{"dim": 1024, "tflops": ...}, ...],
     "memory_bound": [{"bytes": ..., "kernels": 1, "time_s": ...}, ...],
     "attention": [{"flops": ..., "time_s": ...}, ...]}

`memory_bound` and `attention` are micro-benchmarks (optional; profiler/kernels.py):
`bytes` read + written by `kernels` kernels, and the fused attention forward with `flops`
its causal core FLOPs (the count cost_model.terms.layers prices). With `gemm` they are what
cost_model.hardware.calibration fits the device's efficiency constants from. `dtype` (optional) is
the dtype they were measured in.

`seq_length` is the length one device processes (seq_length // cp), matching the key
cost_model.terms.layers looks up. Extra top-level keys (metadata such as `model`, `peak_memory`)
are kept by the profiler for people and ignored here. The service's upload (`POST /v1/profiles`,
api/schemas.py) stores what it is given, so it takes only the keys the profiler writes, with
free-form notes under `metadata`.
"""

from __future__ import annotations

import math
from typing import Any

from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import CalibrationProfile, CommFit, KernelTiming, LayerTiming
from cost_model.specs.vocab import DTYPE_BYTES, Collective, LayerKind, LinkLevel, values

SCHEMA_VERSION = 1
LAYER_KINDS = values(LayerKind)
COLLECTIVES = values(Collective)
LEVELS = values(LinkLevel)


def _num(d: dict, key: str, path: str, minimum: float = 0.0, optional: bool = False) -> float | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SpecError(f"{path}.{key}", f"must be a finite number, got {v!r}")
    if v < minimum:
        raise SpecError(f"{path}.{key}", f"must be >= {minimum}, got {v}")
    return float(v)


def _int(d: dict, key: str, path: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SpecError(f"{path}.{key}", f"must be an integer >= 1, got {v!r}")
    return v


def _choice(d: dict, key: str, path: str, allowed: tuple[str, ...]) -> str:
    v = d.get(key)
    if v not in allowed:
        raise SpecError(f"{path}.{key}", f"unknown value {v!r}", allowed=list(allowed))
    return v


def _list(d: dict, key: str) -> list:
    v = d.get(key, [])
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise SpecError(f"profile.{key}", "must be a list of objects")
    return v


def profile_from_dict(d: Any) -> CalibrationProfile:
    """Validate a profile JSON object; raise SpecError naming the bad field."""
    if not isinstance(d, dict):
        raise SpecError("profile", "must be a JSON object")
    version = d.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SpecError("profile.schema_version", f"unsupported version {version!r}", allowed=[SCHEMA_VERSION])
    device = d.get("device")
    if not isinstance(device, str) or not device:
        raise SpecError("profile.device", "must be a non-empty string (the catalog device name)")
    layers: dict[tuple[str, int, int, int], LayerTiming] = {}
    for i, row in enumerate(_list(d, "layers")):
        path = f"profile.layers[{i}]"
        key = (
            _choice(row, "kind", path, LAYER_KINDS),
            _int(row, "tp", path),
            _int(row, "micro_batch_size", path),
            _int(row, "seq_length", path),
        )
        if key in layers:
            raise SpecError(path, f"duplicate entry for {key}")
        act = _num(row, "activation_bytes", path, optional=True)
        layers[key] = LayerTiming(_num(row, "fwd_s", path), _num(row, "bwd_s", path), act)
    comm: dict[tuple, CommFit] = {}
    for i, row in enumerate(_list(d, "comm")):
        path = f"profile.comm[{i}]"
        key: tuple = (_choice(row, "collective", path, COLLECTIVES), _choice(row, "level", path, LEVELS))
        # a fit measured on one group shape (members per node across nodes) prices that shape;
        # one without it prices the level (comm._fit)
        if row.get("members_per_node") is not None:
            key = (*key, _int(row, "members_per_node", path))
        if key in comm:
            raise SpecError(path, f"duplicate entry for {key}")
        comm[key] = CommFit(_num(row, "alpha_s", path), _num(row, "beta_s_per_byte", path))
    gemm: dict[int, float] = {}
    for i, row in enumerate(_list(d, "gemm")):
        path = f"profile.gemm[{i}]"
        gemm[_int(row, "dim", path)] = _num(row, "tflops", path)
    memory_bound = []
    for i, row in enumerate(_list(d, "memory_bound")):
        path = f"profile.memory_bound[{i}]"
        kernels = _int(row, "kernels", path) if "kernels" in row else 1
        memory_bound.append(KernelTiming(_num(row, "bytes", path), _num(row, "time_s", path), kernels))
    attention = []
    for i, row in enumerate(_list(d, "attention")):
        path = f"profile.attention[{i}]"
        attention.append(KernelTiming(_num(row, "flops", path), _num(row, "time_s", path)))
    source = d.get("source", "")
    if not isinstance(source, str):
        raise SpecError("profile.source", "must be a string")
    dtype = d.get("dtype")
    if dtype is not None and dtype not in DTYPE_BYTES:
        raise SpecError("profile.dtype", f"unknown dtype {dtype!r}", allowed=sorted(DTYPE_BYTES))
    return CalibrationProfile(device=device, layers=layers, comm=comm, gemm_tflops=gemm, source=source,
                              memory_bound=tuple(memory_bound), attention=tuple(attention), dtype=dtype)


def profile_to_dict(p: CalibrationProfile, **meta: Any) -> dict:
    """CalibrationProfile -> profile JSON object; `meta` (device_name, torch_version, ...)
    is added at the top level."""
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "device": p.device, **meta, "source": p.source}
    out["layers"] = [
        {"kind": k[0], "tp": k[1], "micro_batch_size": k[2], "seq_length": k[3],
         "fwd_s": t.fwd_s, "bwd_s": t.bwd_s, "activation_bytes": t.activation_bytes}
        for k, t in sorted(p.layers.items())
    ]
    out["comm"] = [
        {"collective": k[0], "level": k[1], "alpha_s": f.alpha_s, "beta_s_per_byte": f.beta_s_per_byte,
         **({"members_per_node": k[2]} if len(k) > 2 else {})}
        for k, f in sorted(p.comm.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] if len(kv[0]) > 2 else 0))
    ]
    out["gemm"] = [{"dim": dim, "tflops": tf} for dim, tf in sorted(p.gemm_tflops.items())]
    out["memory_bound"] = [{"bytes": k.work, "kernels": k.kernels, "time_s": k.time_s} for k in p.memory_bound]
    out["attention"] = [{"flops": k.work, "time_s": k.time_s} for k in p.attention]
    if p.dtype is not None:
        out["dtype"] = p.dtype
    return out
