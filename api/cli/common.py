"""The flags -> request translation (the request is the REST body; DESIGN.md "Request"),
file loading and output helpers shared by the commands. The flags themselves are in flags.py."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from cost_model.hardware.prices import GpuPrice, parse_user_prices
from cost_model.hardware.profile_schema import profile_from_dict
from cost_model.specs.errors import SpecError
from cost_model.specs.vocab import MODEL_TRANSFORMER, ModelKind, values
from planner.request.errors import every_error, one_error
from planner.request.schema import REQUESTS, validate_as

from .flags import FLAGS


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
    if any(k in d for k in ("hf_config", *values(ModelKind))) or set(d) == {"name"}:
        return d
    if any(k in d for k in ("architectures", "model_type", "num_hidden_layers", "n_embd", "n_layer")):
        return {"hf_config": d}
    if "num_layers" in d and "hidden_size" in d:
        return {MODEL_TRANSFORMER: d}
    raise SpecError("--model", f"{value}: not a model description, HF config.json or layer list")


_HINTS = {"model": "--model", "cluster.gpu": "--gpu", "cluster.num_gpus": "--gpus",
          "training.global_batch_size": "--global-batch", "training.seq_length": "--seq-len",
          "parallelism": "--tp/--pp/--dp/...", "cluster": "--gpu and --gpus", "training": "--global-batch and --seq-len"}


def _set(req: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    d = req
    for key in parents:
        if d.get(key) is None:
            d[key] = {}
        if not isinstance(d[key], dict):  # a malformed --request block: the schema reports it
            return
        d = d[key]
    d[leaf] = value


def request_from_args(args: argparse.Namespace, command: str) -> BaseModel:
    """The request of `command` ("plan", "estimate", "check") from --request and the flags,
    validated by the same schema as the REST body (planner/request/schema.py): the validated
    model, which the facade takes as the REST routes hand it theirs, so both hash and answer
    alike."""
    req: dict[str, Any] = {}
    if getattr(args, "request", None):
        loaded = load_structured(args.request, "--request")
        if not isinstance(loaded, dict):
            raise SpecError("--request", "must hold a JSON/YAML object")
        req = loaded
    if getattr(args, "model", None):
        req["model"] = model_from_flag(args.model)
    for f in FLAGS:
        if f.field is None or f.field == "model" or getattr(args, f.dest, None) is None:
            continue
        value = getattr(args, f.dest)
        if f.group != "config":
            _set(req, f.field, value)
        elif command == "plan":  # a pin: the values the search may use
            _set(req, f"search.{f.field}", value)
        else:  # the configuration: one value
            if isinstance(value, list) and len(value) != 1:
                raise SpecError(f"parallelism.{f.field}", f"{f.name} takes one value in {command}, got {value}",
                                allowed="one value")
            _set(req, f"parallelism.{f.field}", value[0] if isinstance(value, list) else value)
    if getattr(args, "engine", None) is not None:  # the flag overrides the engine a --request file names anywhere
        for block in ("search", "parallelism"):
            if isinstance(req.get(block), dict):
                req[block].pop("engine", None)
    try:
        valid = validate_as(REQUESTS[command], req)
    except SpecError as exc:
        raise one_error([_with_flag_hint(e) for e in every_error(exc)]) from None
    return valid


def _with_flag_hint(exc: SpecError) -> SpecError:
    """A missing field's error with the flag that gives it (`is required (give --global-batch or --request)`)."""
    hint = _HINTS.get(exc.field)
    if exc.message == "is required" and hint:
        return SpecError(exc.field, f"is required (give {hint} or --request)", exc.allowed)
    return exc


def load_profile_arg(args: argparse.Namespace):
    """--profile FILE -> CalibrationProfile (None when not given)."""
    if not getattr(args, "profile", None):
        return None
    return profile_from_dict(load_structured(args.profile, "--profile"))


def load_prices_arg(args: argparse.Namespace) -> dict[str, GpuPrice] | None:
    """--prices FILE (TOML, JSON or YAML: GPU name -> USD per GPU-hour) -> the user's price
    table, each entry sourced as the file (None when not given)."""
    path = getattr(args, "prices", None)
    if not path:
        return None
    if Path(path).suffix.lower() == ".toml":
        if not Path(path).is_file():
            raise SpecError("--prices", f"file {path!r} not found")
        try:
            data = tomllib.loads(Path(path).read_text())
        except tomllib.TOMLDecodeError as exc:
            raise SpecError("--prices", f"{path} is not valid TOML: {exc}") from None
    else:
        data = load_structured(path, "--prices")
    return parse_user_prices(data, path)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False))


def fmt_s(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


def interval_s(pred: Any) -> str:
    """A prediction's step time with its p10-p90 band (prediction.step_time_s_p10 / _p90)."""
    t, lo, hi = pred["step_time_s"], pred.get("step_time_s_p10"), pred.get("step_time_s_p90")
    return fmt_s(t) + (f" (p10-p90 {fmt_s(lo)} - {fmt_s(hi)})" if lo is not None and hi is not None else "")


def progress(line: str) -> None:
    """Progress of a long search, on stderr (stdout stays the result, e.g. with --json)."""
    print(line, file=sys.stderr, flush=True)
