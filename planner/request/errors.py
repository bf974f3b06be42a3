"""pydantic validation errors -> SpecError: the dotted field path (`model.transformer.num_layers`,
`search.tp[1]`), what would be allowed (the field's range, the Literal's words, the
model's field names) and, for an unknown key or word, the one it most likely meant; every
error of an input at once (SpecErrors), the same for the CLI (`validate_as`) and the REST 422
(api/errors.py)."""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from cost_model.specs.errors import SpecError, close_match
from cost_model.validate import range_text

# tags of the request schema's tagged unions (`cluster.gpu`); never field names, so error
# paths drop them
GPU_TAG_NAME, GPU_TAG_OBJECT = "catalog_name", "gpu_object"
UNION_TAGS = frozenset({GPU_TAG_NAME, GPU_TAG_OBJECT})

# the pydantic error type of a free-form object (metadata, hf_config) nested deeper than the
# schema allows (schema.MAX_FREEFORM_DEPTH); its ctx carries the limit as `max_depth`. The REST
# service answers it 400 rather than 422: such a body is refused before anything reads it.
NESTING_TOO_DEEP = "nesting_too_deep"


def _unwrap(tp: Any) -> list[Any]:
    """The types a field annotation may hold (Optional / union / Annotated peeled off)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(tp) for t in _unwrap(a)]
    return [tp]


@functools.cache
def schema_fields(t: Any) -> dict[str, FieldInfo] | None:
    """The pydantic fields of a model, or of a stdlib dataclass validated as one (the layout,
    cost_model.specs.inputs.ParallelConfig, whose annotations carry its bounds); None for
    anything else."""
    if isinstance(t, type) and issubclass(t, BaseModel):
        return dict(t.model_fields)
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        hints = typing.get_type_hints(t, include_extras=True)
        return {f.name: FieldInfo.from_annotated_attribute(hints[f.name], f.default) for f in dataclasses.fields(t)}
    return None


def _field_info(root: Any, parts: list) -> Any:
    """The FieldInfo of the last named field in `parts` when the path ends on it (its
    constraints give the full allowed range), else None (a list item: the error's ctx)."""
    if not parts or not isinstance(parts[-1], str):
        return None
    owners = [f for t in _walk_types(root, parts[:-1]) if (f := schema_fields(t)) is not None]
    return owners[0].get(parts[-1]) if owners else None


def _range(info: Any, ctx: dict) -> str | None:
    bounds = {**ctx}
    for m in getattr(info, "metadata", None) or ():
        for key in ("ge", "gt", "le", "lt"):
            if getattr(m, key, None) is not None:
                bounds.setdefault(key, getattr(m, key))
    return range_text(bounds) or None


def _literal_values(expected: str) -> list:
    out: list = []
    for tok in re.split(r",\s*|\s+or\s+", expected):
        tok = tok.strip()
        if tok.startswith("'") and tok.endswith("'"):
            out.append(tok[1:-1])
        elif re.fullmatch(r"-?\d+", tok):
            out.append(int(tok))
        elif tok in ("True", "False"):
            out.append(tok == "True")
    return out


def _path(parts: list) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string", "string": "a string",
               "dict": "an object", "list": "a list", "model": "an object"}


def spec_error_from(err: dict, root: type[BaseModel] | None = None, prefix: str = "") -> SpecError:
    """One pydantic error (an item of `ValidationError.errors()`, loc relative to `root`)
    -> SpecError with the dotted path from `prefix` and what would be allowed."""
    loc = [p for p in err.get("loc", ()) if p not in UNION_TAGS]
    kind, ctx, given = err.get("type", ""), dict(err.get("ctx") or {}), err.get("input")
    head = [p for p in re.split(r"\.", prefix) if p] if prefix else []
    if kind == "spec":
        sub = [p for p in str(ctx.get("field", "")).split(".") if p]
        return SpecError(_path(head + loc + sub), ctx.get("message", err.get("msg", "")), allowed=ctx.get("allowed"))
    info = _field_info(root, loc) if root is not None else None
    path = _path(head + loc)
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):  # a model's word, a dataclass's word
        parents = [f for t in _walk_types(root, loc[:-1]) if (f := schema_fields(t)) is not None] if root else []
        names = sorted(parents[0]) if parents else None
        return SpecError(path, f"unknown field {loc[-1]!r}", allowed=names, suggestion=close_match(loc[-1], names or ()))
    if kind == "missing":
        return SpecError(path, "is required")
    if kind == NESTING_TOO_DEEP:
        return SpecError(path, err.get("msg", "nested too deep"), allowed=f"<= {ctx.get('max_depth')} levels")
    if kind == "literal_error":
        words = _literal_values(str(ctx.get("expected", "")))
        return SpecError(path, f"unknown value {given!r}", allowed=words, suggestion=close_match(given, words))
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        rng = _range(info, ctx)
        return SpecError(path, f"must be in {rng}, got {given!r}" if rng and ".." in rng else f"must be {rng}, got {given!r}",
                         allowed=rng)
    if kind in ("too_short", "too_long"):
        what = "an empty list allows nothing" if kind == "too_short" and not ctx.get("actual_length") else "has the wrong length"
        return SpecError(path, f"{what} ({ctx.get('actual_length', 0)} entries)", allowed=_length(ctx, info))
    if kind.endswith("_type") or kind.endswith("_parsing"):
        want = _TYPE_WORDS.get(kind.split("_")[0], kind.split("_")[0])
        return SpecError(path, f"must be {want}, got {type(given).__name__} {given!r}")
    return SpecError(path, err.get("msg", "is invalid"))


def _walk_types(root: Any, parts: list) -> list[Any]:
    """The types the path `parts` may reach from `root` (fields, then list/dict items)."""
    cur: list[Any] = [root]
    for p in parts:
        nxt: list[Any] = []
        for t in cur:
            fields = schema_fields(t) if isinstance(p, str) else None
            if fields is not None and p in fields:
                nxt += _unwrap(fields[p].annotation)
            elif isinstance(p, int) and typing.get_origin(t) in (list, dict):
                nxt += _unwrap(typing.get_args(t)[-1])
        cur = nxt
    return cur


def _length(ctx: dict, info: Any) -> str | None:
    lo = ctx.get("min_length")
    hi = ctx.get("max_length")
    for m in getattr(info, "metadata", None) or ():
        lo = getattr(m, "min_length", None) if lo is None else lo
        hi = getattr(m, "max_length", None) if hi is None else hi
    if lo is not None and hi is not None:
        return f"{lo}..{hi} entries"
    return f">= {lo} entries" if lo is not None else (f"<= {hi} entries" if hi is not None else None)


@functools.cache
def _adapter(t: Any) -> TypeAdapter:
    return TypeAdapter(t)


class SpecErrors(SpecError):
    """Several mistakes in one input, each a SpecError, all in `errors`. The first leads: its
    field, message, allowed values and suggestion are this error's, so code that reads one
    error still reads the most telling one; the text says them all, one after the other."""

    def __init__(self, errors: list[SpecError]):
        first = errors[0]
        super().__init__(first.field, first.message, first.allowed, first.suggestion)
        self.errors = list(errors)
        self.args = ("; ".join(str(e) for e in self.errors),)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "errors": [e.to_dict() for e in self.errors]}


def every_error(exc: SpecError) -> list[SpecError]:
    """The mistakes an error reports: those of a SpecErrors, else the error itself."""
    return list(exc.errors) if isinstance(exc, SpecErrors) else [exc]


def one_error(errors: list[SpecError]) -> SpecError:
    """`errors` as one exception: the error itself when alone, else SpecErrors."""
    return errors[0] if len(errors) == 1 else SpecErrors(errors)


_UNKNOWN_KEY = ("extra_forbidden", "unexpected_keyword_argument")


def spec_errors_from(errors: list[dict], root: Any = None, prefix: str = "") -> list[SpecError]:
    """Every pydantic error of one input as a SpecError (spec_error_from), unknown keys first:
    a misspelt key (`global_batch`) is usually why its right spelling (`global_batch_size`) is
    reported missing beside it, so the key and its suggestion lead."""
    ordered = sorted(errors, key=lambda e: e.get("type") not in _UNKNOWN_KEY)
    return [spec_error_from(e, root, prefix) for e in ordered]


def validate_as(model: Any, data: Any, path: str = "") -> Any:
    """`data` validated as `model` (a pydantic model, or a dataclass such as the parallel
    layout), failures raised as one SpecError naming every error (one_error); an object nested
    too deep alone, before any field's mistake (as the service refuses it)."""
    try:
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model.model_validate(data)
        return _adapter(model).validate_python(data)
    except ValidationError as exc:
        errors = exc.errors()
        deep = next((e for e in errors if e.get("type") == NESTING_TOO_DEEP), None)
        if deep is not None:
            raise spec_error_from(deep, model, path) from None
        raise one_error(spec_errors_from(errors, model, path)) from None
