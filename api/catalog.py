"""The built-in model presets and the GPU catalog as rows: what `GET /v1/models` and
`GET /v1/gpus` answer and what `planner models` / `planner gpus` print."""

from __future__ import annotations

from cost_model.hardware.catalog import CATALOG
from cost_model.model.flops import total_params
from cost_model.model.presets import PRESETS, PUBLISHED, param_counts


def models_table() -> list[dict]:
    out = []
    for m in PRESETS.values():
        counts, pub = param_counts(m), PUBLISHED.get(m.name)
        out.append(
            {
                "name": m.name,
                "params_b": round(total_params(m) / 1e9, 2),
                # computed in the model cards' convention (embeddings counted, MTP apart), and
                # the card's own numbers where the preset table has them
                "total_params": counts["total_params"],
                "active_params": counts["active_params"],
                "published_total_params": None if pub is None else int(pub.total_params),
                "published_active_params": None if pub is None else int(pub.active_params),
                "num_layers": m.num_layers,
                "hidden_size": m.hidden_size,
                "num_attention_heads": m.num_attention_heads,
                "num_kv_heads": m.num_kv_heads,
                "ffn_hidden_size": m.ffn_hidden_size,
                "vocab_size": m.vocab_size,
                "mlp": m.mlp,
                "moe": None
                if m.moe is None
                else {"num_experts": m.moe.num_experts, "top_k": m.moe.top_k, "ffn_hidden_size": m.moe.ffn_hidden_size},
            }
        )
    return out


def gpus_table() -> list[dict]:
    return [
        {
            "name": g.name,
            "description": g.description,
            "memory_gib": g.memory_gib,
            "peak_tflops": g.peak_tflops,
            "hbm_gb_s": g.hbm_gb_s,
            "nvlink_gb_s": g.nvlink_gb_s,
            "network_gb_s": g.network_gb_s,
            "gpus_per_node": g.gpus_per_node,
            "source": g.source,
            "efficiency_source": g.efficiency_source,
        }
        for g in CATALOG.values()
    ]
