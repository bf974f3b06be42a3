"""Bad configurations raise SpecError naming the field; Hugging Face config import."""

from __future__ import annotations

import pytest

from cost_model.estimate import estimate
from cost_model.hardware.catalog import get_gpu
from cost_model.model.flops import total_params
from cost_model.model.hf_import import from_hf_config
from cost_model.model.presets import get_preset
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec
from planner.request.parse import parse_cluster, parse_model, parse_parallelism, parse_training


def _cluster(n=64, gpu="a100-80gb") -> ClusterSpec:
    g = get_gpu(gpu)
    return ClusterSpec(g, n, 8, g.nvlink_gb_s, g.network_gb_s, g.intra_node_latency_s, g.inter_node_latency_s)


def _err(fn, *args, **kw) -> SpecError:
    with pytest.raises(SpecError) as info:
        fn(*args, **kw)
    return info.value


def _est(model="gpt3-175b", n=64, gb=64, seq=2048, **cfg):
    m = get_preset(model) if isinstance(model, str) else model
    return estimate(m, _cluster(n), TrainingSpec(gb, seq), ParallelConfig(**cfg))


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(tp=7, pp=1, dp=1), "parallelism.tp"),  # 96 heads not divisible by 7
        (dict(model="llama3-8b", tp=16, dp=1), "parallelism.tp"),  # 32 heads ok, 8 KV heads not
        (dict(tp=8, dp=6, micro_batch_size=1, gb=64, n=64), "training.global_batch_size"),
        (dict(tp=8, dp=4, micro_batch_size=3, gb=64), "training.global_batch_size"),
        (dict(tp=8, pp=2, vpp=2, schedule="1f1b"), "parallelism.vpp"),
        (dict(tp=8, pp=4, stage_layers=(24, 24, 24, 23)), "parallelism.stage_layers"),
        (dict(tp=8, pp=4, stage_layers=(48, 48)), "parallelism.stage_layers"),
        (dict(tp=8, pp=4, stage_layers=(-1, 33, 32, 32)), "parallelism.stage_layers[0]"),
        # a stage with no block: DeepSpeed's PipelineModule builds none (Megatron does)
        (dict(tp=8, pp=4, stage_layers=(0, 32, 32, 32), engine="deepspeed"), "parallelism.stage_layers"),
        (dict(tp=0), "parallelism.tp"),
        (dict(dp=-1), "parallelism.dp"),
        (dict(micro_batch_size=0), "parallelism.micro_batch_size"),
        (dict(tp=8, dp=16), "parallelism"),  # 128 GPUs > 64
        (dict(gb=0), "training.global_batch_size"),
        (dict(seq=-2048), "training.seq_length"),
        (dict(gb=10**12), "training.global_batch_size"),
        (dict(tp=8, pp=2, sequence_parallel=False, recompute="most"), "parallelism.recompute"),
        (dict(tp=8, pp=2, vpp=2, schedule="interleaved", gb=3, dp=1), "parallelism.micro_batch_size"),
        (dict(tp=1, sequence_parallel=True), "parallelism.sequence_parallel"),
        (dict(tp=8, pp=128), "parallelism"),
    ],
)
def test_bad_config_names_field(kwargs, field):
    e = _err(_est, **kwargs)
    assert e.field == field
    assert field in str(e)


def test_tp_error_lists_allowed_divisors():
    e = _err(_est, tp=7)
    assert e.allowed == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]
    assert "allowed" in str(e)
    e = _err(_est, model="llama3-8b", tp=16)
    assert "KV" in e.message and e.allowed == [1, 2, 4, 8]


def test_unknown_gpu_and_preset():
    e = _err(get_gpu, "a100-81gb")
    assert e.field == "cluster.gpu" and "a100-80gb" in e.allowed
    e = _err(get_preset, "gpt-5")
    assert e.field == "model.name" and "gpt3-175b" in e.allowed
    e = _err(parse_cluster, {"gpu": "tpu-v5", "num_gpus": 8})
    assert e.field == "cluster.gpu"
    e = _err(parse_model, {"name": "nope"})
    assert e.field == "model.name"


@pytest.mark.parametrize(
    "transformer,field",
    [
        ({"num_layers": 0, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 1000}, "model.transformer.num_layers"),
        ({"num_layers": 4, "hidden_size": -8, "num_attention_heads": 16, "vocab_size": 1000}, "model.transformer.hidden_size"),
        ({"num_layers": 10**7, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 1000}, "model.transformer.num_layers"),
        ({"num_layers": 4, "hidden_size": 10**9, "num_attention_heads": 16, "vocab_size": 1000}, "model.transformer.hidden_size"),
        ({"num_layers": 4, "hidden_size": 1000, "num_attention_heads": 16, "vocab_size": 1000}, "model.transformer.num_attention_heads"),
        ({"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "num_kv_heads": 5, "vocab_size": 1000}, "model.transformer.num_kv_heads"),
        ({"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 0}, "model.transformer.vocab_size"),
        ({"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16}, "model.transformer.vocab_size"),
        ({"num_layers": "four", "hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 1}, "model.transformer.num_layers"),
    ],
)
def test_bad_model_names_field(transformer, field):
    # type, range and cross-field errors all name the field under model.transformer
    e = _err(parse_model, {"transformer": transformer})
    assert e.field == field
    assert field in str(e)


@pytest.mark.parametrize(
    "cluster,field",
    [
        ({"gpu": "a100-80gb", "num_gpus": 0}, "cluster.num_gpus"),
        ({"gpu": "a100-80gb", "num_gpus": 10**8}, "cluster.num_gpus"),
        ({"gpu": "a100-80gb", "num_gpus": 12, "gpus_per_node": 8}, "cluster.num_gpus"),
        ({"gpu": "a100-80gb", "num_gpus": 8, "inter_node_gb_s": -1}, "cluster.inter_node_gb_s"),
        ({"num_gpus": 8}, "cluster.gpu"),
    ],
)
def test_bad_cluster_names_field(cluster, field):
    assert _err(parse_cluster, cluster).field == field


def test_bad_training_and_parallelism_dicts():
    assert _err(parse_training, {"global_batch_size": 0, "seq_length": 2048}).field == "training.global_batch_size"
    assert _err(parse_training, {"global_batch_size": 8, "seq_length": 2048, "dtype": "int4"}).field == "training.dtype"
    assert _err(parse_parallelism, {"zero": 5}).field == "parallelism.zero"
    assert _err(parse_parallelism, {"schedule": "zb-v"}).field == "parallelism.schedule"
    assert _err(parse_parallelism, {"tp": 2.5}).field == "parallelism.tp"


# ---------------------------------------------------------------- Hugging Face import

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def test_hf_llama3_8b():
    m = from_hf_config(LLAMA3_8B)
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads) == (32, 4096, 32, 8)
    assert (m.ffn_hidden_size, m.vocab_size, m.max_position_embeddings) == (14336, 128256, 8192)
    assert (m.mlp, m.norm, m.position, m.tie_embeddings) == ("swiglu", "rmsnorm", "rope", False)
    assert m.rope_theta == 500000.0 and m.moe is None
    assert total_params(m) == 8_030_261_248  # the published count of Meta-Llama-3-8B


def test_hf_rope_parameters_vs_rope_theta():
    new_style = {k: v for k, v in LLAMA3_8B.items() if k != "rope_theta"}
    new_style["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    assert from_hf_config(new_style).rope_theta == 500000.0
    scaled = {k: v for k, v in LLAMA3_8B.items() if k != "rope_theta"}
    scaled["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}
    assert from_hf_config(scaled).rope_theta is None
    both = dict(LLAMA3_8B, rope_parameters={"rope_theta": 1e4})
    assert from_hf_config(both).rope_theta == 500000.0  # the top-level field wins


def test_hf_mixtral():
    cfg = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
        "vocab_size": 32000, "rms_norm_eps": 1e-5, "rope_theta": 1e6, "hidden_act": "silu",
        "max_position_embeddings": 32768,
    }
    m = from_hf_config(cfg)
    assert m.moe is not None
    assert (m.moe.num_experts, m.moe.top_k, m.moe.ffn_hidden_size) == (8, 2, 14336)
    assert (m.moe.num_shared_experts, m.moe.first_dense_layers, m.moe.layer_freq) == (0, 0, 1)
    assert abs(total_params(m) / 1e9 - 46.7) / 46.7 < 0.02


def test_hf_deepseek_v3():
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "moe_layer_freq": 1, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 129280, "rms_norm_eps": 1e-6, "rope_theta": 10000, "hidden_act": "silu",
        "max_position_embeddings": 163840,
    }
    m = from_hf_config(cfg)
    e = m.moe
    assert (e.num_experts, e.num_shared_experts, e.top_k, e.ffn_hidden_size) == (256, 1, 8, 2048)
    assert e.first_dense_layers == 3
    assert m.ffn_hidden_size == 18432  # the dense layers' FFN
    assert [e.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    assert sum(e.is_moe_layer(i) for i in range(61)) == 58
    assert m.rope_theta == 10000.0


def test_hf_gpt2():
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_layer": 12,
           "n_head": 12, "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257, "resid_pdrop": 0.1}
    m = from_hf_config(cfg)
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads) == (12, 768, 12, 12)
    assert (m.ffn_hidden_size, m.max_position_embeddings, m.mlp, m.norm) == (3072, 1024, "gelu", "layernorm")
    assert m.tie_embeddings and m.dropout
    # GPT-2 small: 124,439,808 parameters (12*(12h^2+13h) + (V + 1024)h + 2h, h = 768)
    assert total_params(m) == 124_439_808


def test_hf_missing_field_is_named():
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"}
    e = _err(from_hf_config, cfg)
    assert e.field == "model.hf_config.num_hidden_layers"
    e = _err(parse_model, {"hf_config": cfg})
    assert "num_hidden_layers" in str(e)


def test_hf_gemma_gated_gelu_mlp():
    cfg = {
        "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "head_dim": 256,
        "hidden_act": "gelu", "hidden_size": 2048, "intermediate_size": 16384,
        "max_position_embeddings": 8192, "num_attention_heads": 8, "num_hidden_layers": 18,
        "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
        "vocab_size": 256000, "tie_word_embeddings": True,
    }
    # Gemma-2B: 18 * (2048*(8*256 + 2*256) + 8*256*2048 + 3*2048*16384 + 2*2048)
    #           + 256000*2048 + 2048 = 2,506,172,416 (the published count)
    assert total_params(from_hf_config(cfg)) == 2_506_172_416
