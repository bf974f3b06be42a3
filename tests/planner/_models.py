"""Small models shared by the planner's brute-force tests."""

from __future__ import annotations


def layers_model(L: int) -> dict:
    """Blocks of different sizes: the mixed-block (stage boundary) CP-SAT model."""
    out = []
    for i in range(L):
        p = (1 + (i * 7) % 5) * 1.5e8
        out.append({"name": f"l{i}", "fwd_flops": 2 * p * 2048, "params": p,
                    "activation_bytes": (2 + (i * 3) % 4) * 2**30, "output_bytes": 8 * 2**20})
    return {"layers": out}
