"""Plans the planner makes for the acceptance cases, and a fake process group per rank.

Each engine test feeds the emitted artifacts to the engine's own code. The process groups are
torch's fake backend (torch.testing._internal.distributed.fake_pg) at the plan's full world
size: collectives are no-ops, but group membership is computed by the engine as on a cluster.
"""

from __future__ import annotations

import contextlib
from functools import cache

import pytest

from planner.launch import emit
from planner.service import plan as make_plan

H100 = {"gpu": "h100-sxm", "gpus_per_node": 8}
REQUESTS = {
    # dense, one node
    "llama3-8b@8": {"model": {"name": "llama3-8b"}, "cluster": {**H100, "num_gpus": 8},
                    "training": {"global_batch_size": 64, "seq_length": 8192}},
    # dense, 8 nodes
    "llama3-70b@64": {"model": {"name": "llama3-70b"}, "cluster": {**H100, "num_gpus": 64},
                      "training": {"global_batch_size": 256, "seq_length": 8192}},
    # MoE with expert parallelism (ep pinned to > 1)
    "mixtral-8x7b@64": {"model": {"name": "mixtral-8x7b"}, "cluster": {**H100, "num_gpus": 64},
                        "training": {"global_batch_size": 256, "seq_length": 4096},
                        "search": {"ep": [2, 4, 8]}},
    # context parallelism pinned to 2
    "llama3-8b-cp2@8": {"model": {"name": "llama3-8b"}, "cluster": {**H100, "num_gpus": 8},
                        "training": {"global_batch_size": 64, "seq_length": 8192},
                        "search": {"cp": 2}},
    # planned for the other engines, unpinned: each engine's own artifact must express the plan
    # its search priced (recompute as the engine runs it, the degrees its artifact has)
    "llama3-70b-torchtitan@64": {"model": {"name": "llama3-70b"}, "engine": "torchtitan", "cluster": {**H100, "num_gpus": 64},
                                 "training": {"global_batch_size": 256, "seq_length": 8192}},
    "llama3-8b-128k-torchtitan@8": {"model": {"name": "llama3-8b"}, "engine": "torchtitan",
                                    "cluster": {**H100, "num_gpus": 8},
                                    "training": {"global_batch_size": 8, "seq_length": 131072}},
    "llama3-8b-deepspeed@16": {"model": {"name": "llama3-8b"}, "engine": "deepspeed", "cluster": {**H100, "num_gpus": 16},
                               "training": {"global_batch_size": 64, "seq_length": 16384}},
}
# Extra plans for engine rules: a pipeline for DeepSpeed (ZeRO-1, and ZeRO-2 which its
# PipelineEngine refuses: planned for the runtime, the one engine here whose ZeRO-2
# combines with a pipeline), and MoE with tp > 1 (torchtitan's expert groups differ).
RULE_REQUESTS = {
    "llama3-8b-pp2-zero1@8": {**REQUESTS["llama3-8b@8"], "search": {"pp": 2, "tp": 1, "cp": 1, "zero": 1, "vpp": 1, "schedule": "1f1b"}},
    "llama3-8b-pp2-zero2@8": {**REQUESTS["llama3-8b@8"], "search": {"pp": 2, "tp": 1, "cp": 1, "zero": 2, "vpp": 1, "schedule": "1f1b", "engine": "runtime"}},
    "mixtral-8x7b-tp2@64": {**REQUESTS["mixtral-8x7b@64"], "search": {"ep": [2, 4, 8], "tp": 2, "etp": 1}},
    "mixtral-8x7b-tp2-etp2@64": {**REQUESTS["mixtral-8x7b@64"], "search": {"ep": [2, 4, 8], "tp": 2, "etp": 2}},
    # MoE parallel folding: ep*etp = 16 > dp*cp = 4, valid only when experts fold over tp*cp*dp
    "mixtral-8x7b-fold@64": {**REQUESTS["mixtral-8x7b@64"],
                             "search": {"tp": 4, "pp": 4, "cp": 1, "ep": 8, "etp": 2}},
    # the overlapped 1F1B expert all-to-all pinned on (Megatron-Core --overlap-moe-expert-parallel-comm)
    "mixtral-8x7b-a2a-overlap@64": {**REQUESTS["mixtral-8x7b@64"],
                                    "search": {"ep": [2, 4, 8], "moe_a2a_overlap": True}},
    # the DeepEP dispatcher pinned (Megatron-Core --moe-token-dispatcher-type flex
    # --moe-flex-dispatcher-backend deepep), alone and under the overlapped 1F1B
    "mixtral-8x7b-deepep@64": {**REQUESTS["mixtral-8x7b@64"],
                               "search": {"ep": [8], "moe_dispatcher": ["deepep"]}},
    "mixtral-8x7b-deepep-overlap@64": {**REQUESTS["mixtral-8x7b@64"],
                                       "search": {"ep": [8], "moe_dispatcher": ["deepep"], "moe_a2a_overlap": True}},
    # token dropping padded to the capacity (Megatron-Core --moe-expert-capacity-factor
    # --moe-pad-expert-input-to-capacity)
    "mixtral-8x7b-tokendrop@64": {**REQUESTS["mixtral-8x7b@64"],
                                  "training": {**REQUESTS["mixtral-8x7b@64"]["training"], "moe_capacity_factor": 1.25,
                                               "moe_pad_to_capacity": True},
                                  "search": {"ep": [8]}},
}
# context-parallel communication pinned (Megatron-Core --cp-comm-type): Ulysses all-to-all,
# and the hierarchical a2a+p2p with its --hierarchical-context-parallel-sizes
CP_REQUESTS = {
    "llama2-7b-cp4-a2a@16": {"model": {"name": "llama2-7b"}, "cluster": {**H100, "num_gpus": 16},
                             "training": {"global_batch_size": 16, "seq_length": 32768},
                             "search": {"cp": 4, "cp_comm": "a2a"}},
    "llama3-70b-cp8-a2a+p2p@64": {**REQUESTS["llama3-70b@64"],
                                  "search": {"tp": 2, "cp": 8, "cp_comm": "a2a+p2p"}},
}
RULE_REQUESTS.update(CP_REQUESTS)
CP_CASES = sorted(CP_REQUESTS)
# more virtual stages than blocks (32 + 2): the first holds only the embedding, the last only
# the loss (Megatron's layout string, --pipeline-model-parallel-layout "E|t|...|t|L")
EMPTY_END_REQUESTS = {
    "llama3-8b-empty-ends@8": {**REQUESTS["llama3-8b@8"],
                               "search": {"pp": 2, "vpp": 17, "tp": 1, "cp": 1, "engine": "megatron"}},
}
RULE_REQUESTS.update(EMPTY_END_REQUESTS)
# the zero-bubble family pinned for torchtitan (parallelism.pipeline_parallel_schedule
# InterleavedZeroBubble at 2 stages per rank, ZBVZeroBubble and DualPipeV in a V)
ZERO_BUBBLE_REQUESTS = {
    f"llama3-8b-{sched}-torchtitan@8": {
        "model": {"name": "llama3-8b"}, "engine": "torchtitan", "cluster": {**H100, "num_gpus": 8},
        "training": {"global_batch_size": 32, "seq_length": 4096},
        # every degree pinned; a zero-bubble line is found, not proven (planner/space.py): 2 s ends it
        "search": {"pp": 4, "tp": 1, "cp": 1, "vpp": 2, "micro_batch_size": 1, "schedule": sched,
                   "recompute": "none", "time_limit_s": 2}}
    for sched in ("zb1p", "zbv", "dualpipev")
}
RULE_REQUESTS.update(ZERO_BUBBLE_REQUESTS)
ZERO_BUBBLE_CASES = sorted(ZERO_BUBBLE_REQUESTS)
EMPTY_END_CASES = sorted(EMPTY_END_REQUESTS)
# architectures beyond a Llama block: head_dim apart from hidden / heads and QK-norm
# (Qwen3-235B-A22B), MLA, shared experts, dense first layers and MTP (DeepSeek-V3), an MoE
# Llama (Mixtral 8x22B), and GPT-OSS (sliding windows, sinks, biases, the clamped quick-GeGLU)
ARCH_REQUESTS = {
    f"{name}@256": {"model": {"name": name}, "cluster": {**H100, "num_gpus": 256},
                    "training": {"global_batch_size": 1024, "seq_length": 4096}, "search": {"time_limit_s": 5}}
    for name in ("qwen3-235b-a22b", "deepseek-v3", "mixtral-8x22b", "gpt-oss-120b")
}
RULE_REQUESTS.update(ARCH_REQUESTS)
ARCH_CASES = sorted(ARCH_REQUESTS)
# hybrid sharding pinned (dp_replicate = 2 over 2 nodes): torchtitan HSDP at zero 3, with and
# without cp in the shard group, and Megatron's distributed optimizer in 2 instances
_TWO_NODES = {"model": {"name": "llama3-8b"}, "cluster": {**H100, "num_gpus": 16},
              "training": {"global_batch_size": 64, "seq_length": 4096}}
HYBRID_REQUESTS = {
    "llama3-8b-hsdp-torchtitan@16": {**_TWO_NODES, "engine": "torchtitan",
                                     "search": {"tp": 1, "pp": 1, "cp": 1, "zero": 3, "dp_replicate": 2}},
    "llama3-8b-hsdp-cp2-torchtitan@16": {**_TWO_NODES, "engine": "torchtitan",
                                         "search": {"tp": 1, "pp": 1, "cp": 2, "zero": 3, "dp_replicate": 2}},
    "llama3-8b-instances-cp2@16": {**_TWO_NODES, "search": {"tp": 2, "pp": 1, "cp": 2, "zero": 1, "dp_replicate": 2}},
}
RULE_REQUESTS.update(HYBRID_REQUESTS)
HYBRID_CASES = sorted(HYBRID_REQUESTS)
FOLD_CASES = ["mixtral-8x7b-fold@64"]
OVERLAP_CASES = ["mixtral-8x7b-a2a-overlap@64", "mixtral-8x7b-deepep-overlap@64"]
DEEPEP_CASES = ["mixtral-8x7b-deepep@64", "mixtral-8x7b-deepep-overlap@64"]
CAPACITY_CASES = ["mixtral-8x7b-tokendrop@64"]
CASES = sorted(REQUESTS)


@cache
def planned(name: str) -> dict:
    """The plan as planner.service.plan returns it, with every launch target emitted."""
    req = {**REQUESTS, **RULE_REQUESTS}[name]
    p = make_plan(req).model_dump(mode="json")  # the plan.json the artifacts are emitted from
    p["launch"] = emit({k: v for k, v in p.items() if k != "launch"})
    return p


@pytest.fixture(params=CASES)
def case(request) -> dict:
    return planned(request.param)


def groups_of(ranks_doc: dict, kind: str) -> list[list[int]]:
    return ranks_doc["groups"][kind]


def group_containing(groups: list[list[int]], rank: int) -> list[int]:
    for g in groups:
        if rank in g:
            return g
    raise AssertionError(f"rank {rank} in no group")


@contextlib.contextmanager
def fake_world(rank: int, world_size: int):
    """torch.distributed on the fake backend as `rank` of `world_size`."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield dist
    finally:
        dist.destroy_process_group()
