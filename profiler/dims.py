"""The shape of the Llama-style model the profiler measures and the runtime runs.

Torch-free, so the runtime's plan (planner/runtime/plan_io.py RunPlan.model) carries one
without importing torch; profiler/transformer.py builds the modules from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.specs.vocab import MLP_SWIGLU, Mlp, values


@dataclass(frozen=True)
class ModelDims:
    """Shape of a Llama-style model (the fields the plan's ``model`` section carries)."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    mlp: str = MLP_SWIGLU
    tie_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not divisible by "
                f"num_kv_heads {self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.mlp not in values(Mlp):
            raise ValueError(f"mlp {self.mlp!r} not supported (swiglu, gelu)")
