"""Hugging Face import of today's families: fields read per transformers' configuration
classes (see cost_model/model/hf_import.py for the files), unknown fields ignored, missing
required ones named by their path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cost_model.model import attention, flops
from cost_model.model.hf_import import from_hf_config
from cost_model.specs.errors import SpecError

DATA = Path(__file__).parent / "data" / "hf"


def load(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def err(cfg: dict) -> SpecError:
    with pytest.raises(SpecError) as e:
        from_hf_config(cfg)
    return e.value


def test_deepseek_v3_reads_mla_mtp_and_the_router_bias():
    m = from_hf_config(load("deepseek_v3"))
    x = m.mla
    assert (x.q_lora_rank, x.kv_lora_rank, x.qk_nope_head_dim, x.qk_rope_head_dim, x.v_head_dim) == (1536, 512, 128, 64, 128)
    assert m.num_nextn_predict_layers == 1 and m.moe.router_bias  # topk_method noaux_tc
    assert sum(m.moe.is_moe_layer(i) for i in range(61)) == 58 and not m.moe.is_moe_layer(2)
    assert not m.tie_embeddings and m.rope_theta == 10000.0


def test_router_fields():
    """scoring_func / n_group / topk_group / routed_scaling_factor / norm_topk_prob as the
    configs write them; one group is plain top-k; GLM-4.5's router is sigmoid without a field."""
    e = from_hf_config(load("deepseek_v3")).moe
    assert (e.score_function, e.num_groups, e.group_top_k, e.topk_scaling_factor, e.normalize_top_k) == (
        "sigmoid", 8, 4, 2.5, True)
    e = from_hf_config(load("kimi_k2")).moe
    assert (e.score_function, e.num_groups, e.group_top_k, e.topk_scaling_factor) == ("sigmoid", 0, 0, 2.827)
    assert from_hf_config(load("glm4_5")).moe.score_function == "sigmoid"
    e = from_hf_config(load("qwen3_30b_a3b")).moe
    assert (e.score_function, e.num_groups, e.topk_scaling_factor, e.normalize_top_k) == ("softmax", 0, None, True)
    assert not from_hf_config(dict(load("qwen3_30b_a3b"), norm_topk_prob=False)).moe.normalize_top_k


@pytest.mark.parametrize("moe,field,allowed", [
    ({"num_groups": 8}, "group_top_k", "both > 0, or both 0"),
    ({"num_groups": 3, "group_top_k": 1}, "num_groups", [1, 2, 4, 8, 16]),
    ({"num_groups": 4, "group_top_k": 5}, "group_top_k", "1..4"),
    ({"num_groups": 8, "group_top_k": 1}, "group_top_k", "4..8"),  # 2 experts per group, top_k 8
])
def test_group_limited_routing_is_checked(moe, field, allowed):
    from planner.request.parse import parse_model

    block = {"num_experts": 16, "top_k": 8, "ffn_hidden_size": 32, **moe}
    with pytest.raises(SpecError) as e:
        parse_model({"transformer": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
                                     "moe": block}})
    assert e.value.field == f"model.transformer.moe.{field}" and e.value.allowed == allowed


def test_mla_without_q_lora_is_a_plain_q_projection():
    # DeepSeek-V2-Lite style: q_lora_rank null -> q: h -> a*(nope + rope)
    cfg = dict(load("deepseek_v3"), q_lora_rank=None)
    m = from_hf_config(cfg)
    names = [p.name for p in attention.projections(m)]
    assert names == ["q", "kv_down", "kv_up", "out"]
    full = from_hf_config(load("deepseek_v3"))
    diff = attention.attention_params(full) - attention.attention_params(m)
    assert diff == 7168 * 1536 + 1536 + 1536 * 128 * 192 - 7168 * 128 * 192


def test_kimi_k2_is_the_deepseek_layout():
    m = from_hf_config(load("kimi_k2"))
    assert m.mla is not None and m.num_attention_heads == 64 and m.moe.num_experts == 384
    assert m.num_nextn_predict_layers == 0 and m.moe.first_dense_layers == 1


def test_qwen3_moe_sparse_step_and_mlp_only_layers():
    # Qwen3MoeDecoderLayer: MoE iff i not in mlp_only_layers and (i + 1) % step == 0
    cfg = dict(load("qwen3_30b_a3b"), decoder_sparse_step=2, mlp_only_layers=[3, 7])
    m = from_hf_config(cfg)
    expected = [i for i in range(48) if i not in (3, 7) and (i + 1) % 2 == 0]
    assert [i for i in range(48) if m.moe.is_moe_layer(i)] == expected
    # the dense blocks use intermediate_size (6144), the experts moe_intermediate_size
    assert m.ffn_hidden_size == 6144 and m.moe.ffn_hidden_size == 768
    assert m.qk_norm and m.head_dim == 128 and m.sliding_window is None  # use_sliding_window false


def test_gpt_oss_fields():
    cfg = load("gpt_oss_120b")
    m = from_hf_config(cfg)
    assert m.attention_sinks and m.qkv_bias and m.out_proj_bias and m.moe.expert_bias and m.moe.router_bias
    assert m.sliding_window == 128 and m.layer_types[:2] == (attention.SLIDING, attention.FULL)
    # experts_per_token alone (the original release's name) is read too
    only_old = {k: v for k, v in cfg.items() if k != "num_experts_per_tok"}
    assert from_hf_config(only_old).moe.top_k == 4
    # without layer_types: GptOssConfig's default, sliding on even blocks
    no_types = {k: v for k, v in cfg.items() if k != "layer_types"}
    assert from_hf_config(no_types).layer_types == m.layer_types


def test_llama4_nested_text_config():
    m = from_hf_config(load("llama4_maverick"))
    assert m.ffn_hidden_size == 16384 and m.moe.ffn_hidden_size == 8192  # intermediate_size_mlp vs intermediate_size
    assert m.moe.num_shared_experts == 1 and m.moe.num_experts == 128 and m.moe.top_k == 1
    assert [i for i in range(48) if m.moe.is_moe_layer(i)] == list(range(1, 48, 2))
    assert m.attention_chunk_size == 8192 and m.layer_types.count(attention.FULL) == 12
    assert not m.qk_norm  # Llama 4's qk norm is a weightless L2 norm
    # without moe_layers, interleave_moe_layer_step gives the same blocks (Llama4TextConfig)
    cfg = load("llama4_maverick")
    cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if k != "moe_layers"}
    assert from_hf_config(cfg).moe.moe_layers == m.moe.moe_layers


def test_nested_missing_size_field_is_named_with_its_path():
    cfg = load("llama4_scout")
    cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if k != "hidden_size"}
    assert err(cfg).field == "model.hf_config.text_config.hidden_size"
    cfg = load("gemma3_27b")
    del cfg["text_config"]
    assert err(cfg).field == "model.hf_config.text_config"


def test_gemma3_nested_defaults_and_pattern():
    m = from_hf_config(load("gemma3_27b"))
    # vocab_size, tie_word_embeddings, sliding_window_pattern come from Gemma3TextConfig's
    # defaults (the checkpoint saves text_config as a diff against them)
    assert m.vocab_size == 262208 and m.tie_embeddings and m.sliding_window == 1024
    assert m.layer_types.count(attention.FULL) == 10 and m.block_norms == 4 and m.qk_norm
    assert m.head_dim == 128 and m.num_kv_heads == 16


def test_phi4_and_glm45():
    phi = from_hf_config(load("phi4"))
    assert (phi.num_attention_heads, phi.num_kv_heads, phi.ffn_hidden_size) == (40, 10, 17920)
    assert phi.sliding_window is None and not phi.tie_embeddings
    glm = from_hf_config(load("glm4_5"))
    assert glm.qkv_bias and not glm.out_proj_bias and glm.qk_norm  # Glm4MoeAttention: o_proj unbiased
    assert glm.moe.num_experts == 160 and glm.moe.num_shared_experts == 1 and glm.moe.first_dense_layers == 3
    assert glm.head_dim == 128 and glm.num_nextn_predict_layers == 1


def test_unknown_fields_ignored():
    cfg = load("qwen3_235b_a22b")
    noisy = dict(cfg, some_future_field={"a": 1}, another=[1, 2, 3])
    assert from_hf_config(noisy) == from_hf_config(cfg)


def test_missing_required_fields_are_named():
    cfg = {k: v for k, v in load("deepseek_v3").items() if k != "v_head_dim"}
    assert err(cfg).field == "model.hf_config.v_head_dim"
    cfg = {k: v for k, v in load("gpt_oss_120b").items() if k not in ("num_experts_per_tok", "experts_per_token")}
    assert err(cfg).field == "model.hf_config.num_experts_per_tok"
    bad = dict(load("gpt_oss_120b"), layer_types=["sliding_attention", "global"] * 18)
    assert err(bad).field == "model.hf_config.layer_types[1]"


@pytest.mark.parametrize("extra,field,what", [
    # Qwen3-Next-80B-A3B: Gated DeltaNet blocks, full attention every 4th
    ({"model_type": "qwen3_next", "linear_num_value_heads": 32, "full_attention_interval": 4},
     "linear_num_value_heads", "Gated DeltaNet"),
    ({"layer_types": ["linear_attention"] * 3 + ["full_attention"]}, "layer_types[0]", "'linear_attention'"),
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M-M*-"}, "hybrid_override_pattern", "Mamba-2"),
    ({"model_type": "jamba", "attn_layer_period": 8}, "attn_layer_period", "Mamba"),
    ({"model_type": "deepseek_v32", "index_topk": 2048}, "index_topk", "DeepSeek Sparse Attention"),
    ({"model_type": "minimax", "attn_type_list": [0] * 7 + [1]}, "attn_type_list", "lightning"),
    ({"model_type": "mamba2"}, "model_type", "state-space"),
])
def test_blocks_other_than_attention_are_refused_by_name(extra, field, what):
    """A config whose blocks are not softmax attention + MLP is refused by the field that
    shows them, not priced as attention (one of them, a window-less 'linear_attention'
    layer_types, used to pass as full attention)."""
    e = err(dict(load("qwen3_30b_a3b"), **extra))
    assert e.field == f"model.hf_config.{field}" and what in e.message and "model.kind='layers'" in e.message


def test_softmax_only_attn_type_list_is_attention():
    """MiniMax-M2 writes attn_type_list of ones (every block softmax attention): imported."""
    cfg = load("qwen3_30b_a3b")
    assert from_hf_config(dict(cfg, attn_type_list=[1] * cfg["num_hidden_layers"])) == from_hf_config(cfg)


def test_imports_count_the_same_as_their_blocks():
    # every imported model: total = sum of blocks + embeddings + head (tied once)
    for f in sorted(DATA.glob("*.json")):
        m = from_hf_config(json.loads(f.read_text()))
        blocks = sum(flops.block_params(m, m.moe is not None and m.moe.is_moe_layer(i)) for i in range(m.num_layers))
        emb = m.vocab_size * m.hidden_size
        head = 0 if m.tie_embeddings else emb
        assert flops.total_params(m) == blocks + emb + head + m.hidden_size, f.name


def test_architecture_checks_name_the_field():
    from dataclasses import replace

    from cost_model.model.checks import check_architecture
    from cost_model.model.presets import PRESETS

    for m in PRESETS.values():
        check_architecture(m)  # every preset is consistent
    oss = PRESETS["gpt-oss-120b"]
    cases = [
        (replace(oss, layer_types=oss.layer_types[:-1]), "model.layer_types"),
        (replace(oss, sliding_window=None), "model.sliding_window"),
        (replace(PRESETS["llama4-scout"], attention_chunk_size=None), "model.attention_chunk_size"),
        (replace(oss, moe=replace(oss.moe, moe_layers=(0, 36))), "model.moe.moe_layers"),
    ]
    for m, field in cases:
        with pytest.raises(SpecError) as e:
            check_architecture(m)
        assert e.value.field == field


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gemma3-27b", "llama4-scout"])
def test_presets_with_layer_types_pass_the_strict_schema(name):
    """Specs keep sequences (layer_types, window lists) as tuples; the request schema's
    strict lists must still accept a preset when the estimate validates it."""
    from cost_model.model.presets import get_preset
    from cost_model.validate import validate_model

    m = get_preset(name)
    assert isinstance(m.layer_types, tuple) and m.layer_types
    validate_model(m)  # raised "model.layer_types: must be a list, got tuple" before
