"""Consistency of the architecture-variant fields of a TransformerSpec (MLA, per-block
attention kinds, explicit MoE blocks, MTP). validate.validate_model calls this for every
transformer; each refusal names the field as the request spells it (`model.…`)."""

from __future__ import annotations

from cost_model.model.attention import CHUNKED, LAYER_TYPES, SLIDING
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import TransformerSpec
from cost_model.specs.vocab import MLP_SWIGLU


def check_architecture(m: TransformerSpec) -> None:
    if m.layer_types is not None:
        if len(m.layer_types) != m.num_layers:
            raise SpecError(
                "model.layer_types", f"has {len(m.layer_types)} entries for {m.num_layers} layers", allowed=list(LAYER_TYPES)
            )
        for i, kind in enumerate(m.layer_types):
            if kind not in LAYER_TYPES:
                raise SpecError(f"model.layer_types[{i}]", f"unknown attention kind {kind!r}", allowed=list(LAYER_TYPES))
        if SLIDING in m.layer_types and not m.sliding_window:
            raise SpecError("model.sliding_window", "sliding_attention blocks need a window", allowed="> 0")
        if CHUNKED in m.layer_types and not m.attention_chunk_size:
            raise SpecError("model.attention_chunk_size", "chunked_attention blocks need a chunk size", allowed="> 0")
    for name in ("sliding_window", "attention_chunk_size"):
        v = getattr(m, name)
        if v is not None and v <= 0:
            raise SpecError(f"model.{name}", f"must be > 0, got {v!r}", allowed="> 0")
    if m.mla is not None:
        x = m.mla
        for name in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
            if getattr(x, name) <= 0:
                raise SpecError(f"model.mla.{name}", f"must be > 0, got {getattr(x, name)!r}", allowed="> 0")
        if x.qk_rope_head_dim < 0 or (x.q_lora_rank is not None and x.q_lora_rank <= 0):
            raise SpecError("model.mla", "qk_rope_head_dim must be >= 0 and q_lora_rank > 0 or null", allowed=">= 0")
    if m.num_nextn_predict_layers < 0:
        raise SpecError("model.num_nextn_predict_layers", "must be >= 0", allowed=">= 0")
    if m.block_norms < 0:
        raise SpecError("model.block_norms", "must be >= 0", allowed=">= 0")
    if m.swiglu_limit is not None:
        if m.swiglu_limit <= 0:
            raise SpecError("model.swiglu_limit", f"must be > 0, got {m.swiglu_limit!r}", allowed="> 0")
        if m.mlp != MLP_SWIGLU:
            raise SpecError("model.swiglu_limit", f"a clamp of the gated MLP needs mlp {MLP_SWIGLU!r}, not {m.mlp!r}",
                            allowed=[MLP_SWIGLU])
    if m.moe is not None and m.moe.moe_layers is not None:
        bad = [i for i in m.moe.moe_layers if not 0 <= i < m.num_layers]
        if bad:
            raise SpecError("model.moe.moe_layers", f"indices {bad} outside 0..{m.num_layers - 1}", allowed=f"0..{m.num_layers - 1}")
