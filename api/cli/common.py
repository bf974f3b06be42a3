"""Flags shared by the commands, and the flags -> request-dict translation (the request
dict is the REST body; DESIGN.md "Request")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from cost_model.errors import SpecError

DTYPES = ("bf16", "fp16", "fp8", "fp32")


def load_structured(path: str | Path, field: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise SpecError(field, f"file {str(p)!r} not found")
    text = p.read_text()
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            return yaml.safe_load(text)
        return json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SpecError(field, f"{p} is not valid {'YAML' if p.suffix.lower() in ('.yaml', '.yml') else 'JSON'}: {exc}") from None


def model_from_flag(value: str) -> dict:
    """--model NAME|FILE: a preset name, or a file with a model description / HF config."""
    if not (Path(value).is_file() or value.endswith((".json", ".yaml", ".yml"))):
        return {"name": value}
    d = load_structured(value, "--model")
    if not isinstance(d, dict):
        raise SpecError("--model", f"{value} must hold a JSON/YAML object")
    if isinstance(d.get("model"), dict):
        d = d["model"]
    if any(k in d for k in ("hf_config", "transformer", "layers")) or set(d) == {"name"}:
        return d
    if any(k in d for k in ("architectures", "model_type", "num_hidden_layers", "n_embd", "n_layer")):
        return {"hf_config": d}
    if "num_layers" in d and "hidden_size" in d:
        return {"transformer": d}
    raise SpecError("--model", f"{value}: not a model description, HF config.json or layer list")


def add_problem_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("problem (flags override --request)")
    g.add_argument("--request", metavar="FILE", help="whole request as JSON/YAML (REST body schema)")
    g.add_argument("--model", metavar="NAME|FILE", help="preset name, or a JSON/YAML model description / HF config.json")
    g.add_argument("--gpu", metavar="NAME", help="GPU type from `planner gpus`")
    g.add_argument("--gpus", type=int, metavar="N", help="number of GPUs")
    g.add_argument("--gpus-per-node", type=int, metavar="N")
    g.add_argument("--intra-node-gb-s", type=float, metavar="X", help="NVLink GB/s per GPU per direction")
    g.add_argument("--inter-node-gb-s", type=float, metavar="X", help="network GB/s per GPU per direction")
    g.add_argument("--global-batch", type=int, metavar="N", help="sequences per step")
    g.add_argument("--seq-len", type=int, metavar="N")
    g.add_argument("--dtype", choices=DTYPES)
    g.add_argument("--profile", metavar="FILE", help="profile JSON from `planner profile`")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def add_config_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("configuration (estimate/check)")
    for name in ("tp", "pp", "dp", "cp", "ep", "vpp"):
        g.add_argument(f"--{name}", type=int, metavar="N")
    g.add_argument("--micro-batch", type=int, metavar="N")
    g.add_argument("--recompute", choices=("none", "selective", "full"))
    g.add_argument("--sequence-parallel", action="store_true", default=None)
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3))
    g.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved"))


def request_from_args(args: argparse.Namespace, need_parallelism: bool = False) -> dict:
    req: dict[str, Any] = {}
    if getattr(args, "request", None):
        loaded = load_structured(args.request, "--request")
        if not isinstance(loaded, dict):
            raise SpecError("--request", "must hold a JSON/YAML object")
        req = loaded
    if args.model:
        req["model"] = model_from_flag(args.model)
    cluster = dict(req.get("cluster") or {})
    for flag, key in (("gpu", "gpu"), ("gpus", "num_gpus"), ("gpus_per_node", "gpus_per_node"),
                      ("intra_node_gb_s", "intra_node_gb_s"), ("inter_node_gb_s", "inter_node_gb_s")):
        if getattr(args, flag, None) is not None:
            cluster[key] = getattr(args, flag)
    req["cluster"] = cluster
    training = dict(req.get("training") or {})
    for flag, key in (("global_batch", "global_batch_size"), ("seq_len", "seq_length"), ("dtype", "dtype")):
        if getattr(args, flag, None) is not None:
            training[key] = getattr(args, flag)
    req["training"] = training
    if hasattr(args, "micro_batch"):
        par = dict(req.get("parallelism") or {})
        for flag, key in (("tp", "tp"), ("pp", "pp"), ("dp", "dp"), ("cp", "cp"), ("ep", "ep"), ("vpp", "vpp"),
                          ("micro_batch", "micro_batch_size"), ("recompute", "recompute"),
                          ("sequence_parallel", "sequence_parallel"), ("zero", "zero"), ("schedule", "schedule")):
            if getattr(args, flag, None) is not None:
                par[key] = getattr(args, flag)
        if par:
            req["parallelism"] = par
    for key, flag in (("model", "--model"),):
        if key not in req:
            raise SpecError("model", f"is required (give {flag} or --request)")
    if "gpu" not in cluster:
        raise SpecError("cluster.gpu", "is required (give --gpu or --request)")
    if "num_gpus" not in cluster:
        raise SpecError("cluster.num_gpus", "is required (give --gpus or --request)")
    if need_parallelism and not req.get("parallelism"):
        raise SpecError("parallelism", "is required (give --tp/--pp/--dp/... or a --request with 'parallelism')")
    return req


def load_profile_arg(args: argparse.Namespace):
    """--profile FILE -> CalibrationProfile (None when not given)."""
    if not getattr(args, "profile", None):
        return None
    from cost_model.profile_schema import profile_from_dict

    return profile_from_dict(load_structured(args.profile, "--profile"))


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def fmt_s(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"
