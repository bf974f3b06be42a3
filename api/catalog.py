"""The built-in model presets, the GPU catalog and the systems catalog as rows: what
`GET /v1/models`, `GET /v1/gpus` and `GET /v1/systems` answer and what `planner models` /
`planner gpus` / `planner systems` print."""

from __future__ import annotations

from cost_model.hardware.catalog import CATALOG
from cost_model.hardware.network import SYSTEMS
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


def systems_table() -> list[dict]:
    return [
        {
            "name": s.name,
            "description": s.description,
            "gpu": s.gpu,
            "gpus_per_node": s.gpus_per_node,
            "network": s.network.describe(),
            "nics_per_node": s.network.nics,
            "nic_gb_s": s.network.nic_gb_s,
            "node_network_gb_s": s.network.node_gb_s,
            "network_gb_s_per_gpu": s.network.per_gpu_gb_s(s.gpus_per_node),
            "rail_optimized": s.rail_optimized,
            "oversubscription": s.oversubscription,
            "nvlink_domain": s.nvlink_domain or s.gpus_per_node,
            "nvls": s.nvls,
            "source": s.source,
        }
        for s in SYSTEMS.values()
    ]
