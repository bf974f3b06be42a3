"""Kubeflow Trainer v2 TrainJob, checked against a schema written from the CRD's documented
fields (kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go @ 8c0f5059bd51: the
kubebuilder markers MinLength/MaxLength/Minimum/MaxItems and the XValidation rules). The
structural schema keeps only known fields, so an unknown key would be dropped silently: the
checker refuses it instead."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import yaml

from planner.launch import emit

from .test_launch import LAYERS_PLAN, PLANS, _plan

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # XValidation on TrainJob: RFC 1035 label

S = str
ENV_VAR = {"name": (S, {"min": 1}), "value": (S, {}), "valueFrom": (dict, {})}
RESOURCES = {"limits": (dict, {}), "requests": (dict, {}), "claims": (list, {})}
SCHEMA = {
    "apiVersion": (S, {"enum": ["trainer.kubeflow.org/v1alpha1"]}),
    "kind": (S, {"enum": ["TrainJob"]}),
    "metadata": ({"name": (S, {"max": 63, "pattern": NAME_RE}), "namespace": (S, {}), "labels": (dict, {}),
                  "annotations": (dict, {})}, {"required": ["name"]}),
    "spec": ({
        "runtimeRef": ({"name": (S, {"min": 1, "max": 253}), "apiGroup": (S, {"max": 253}),
                        "kind": (S, {"max": 253})}, {"required": ["name"]}),
        "initializer": (dict, {}),
        "trainer": ({
            "image": (S, {"max": 500}),
            "command": ([S], {"max_items": 128}),
            "args": ([S], {"max_items": 128}),
            "env": ([ENV_VAR], {"max_items": 128}),
            "numNodes": (int, {"minimum": 0}),
            "resourcesPerNode": (RESOURCES, {}),
            "numProcPerNode": (int, {"minimum": 1}),
        }, {}),
        "runtimePatches": (list, {"max_items": 16}),
        "suspend": (bool, {}),
        "activeDeadlineSeconds": (int, {"minimum": 1}),
        "managedBy": (S, {"enum": ["trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"]}),
    }, {"required": ["runtimeRef"]}),
}


def check(value, spec, path="$") -> list[str]:
    """Errors of `value` against (type | {field: spec} | [item spec], rules)."""
    kind, rules = spec
    errs: list[str] = []
    if isinstance(kind, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected object"]
        errs += [f"{path}.{k}: unknown field" for k in value if k not in kind]
        errs += [f"{path}.{k}: required" for k in rules.get("required", []) if k not in value]
        for k, sub in kind.items():
            if k in value:
                errs += check(value[k], sub, f"{path}.{k}")
        return errs
    if isinstance(kind, list):
        if not isinstance(value, list):
            return [f"{path}: expected array"]
        if len(value) > rules.get("max_items", 10**9):
            errs.append(f"{path}: more than {rules['max_items']} items")
        for i, item in enumerate(value):
            errs += check(item, (kind[0], {}), f"{path}[{i}]")
        return errs
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)) or not isinstance(value, kind):
        return [f"{path}: expected {kind.__name__}, got {type(value).__name__}"]
    if isinstance(value, str):
        if len(value) < rules.get("min", 0) or len(value) > rules.get("max", 10**9):
            errs.append(f"{path}: length {len(value)} out of range")
        if "pattern" in rules and not rules["pattern"].match(value):
            errs.append(f"{path}: does not match {rules['pattern'].pattern}")
    if "enum" in rules and value not in rules["enum"]:
        errs.append(f"{path}: {value!r} not in {rules['enum']}")
    if "minimum" in rules and value < rules["minimum"]:
        errs.append(f"{path}: {value} < {rules['minimum']}")
    return errs


def test_checker_refuses_what_the_crd_refuses():
    good = emit(PLANS["llama_gqa"], ["trainjob"])["trainjob"]["manifest"]
    assert check(good, (SCHEMA, {})) == []
    bad = yaml.safe_load(yaml.safe_dump(good))
    bad["metadata"]["name"] = "P_1"
    bad["spec"]["trainer"]["numProcPerNode"] = 0
    bad["spec"]["trainer"]["gpus"] = 8
    del bad["spec"]["runtimeRef"]
    errs = check(bad, (SCHEMA, {}))
    assert len(errs) == 4, errs


@pytest.mark.parametrize("name", sorted(PLANS))
def test_trainjob_matches_schema_and_plan(name, tmp_path):
    plan = PLANS[name]
    launch = emit(plan)
    art = launch["trainjob"]
    doc = yaml.safe_load(art["yaml"])
    assert doc == art["manifest"]
    assert check(doc, (SCHEMA, {})) == []
    trainer = doc["spec"]["trainer"]
    assert doc["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert doc["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    assert trainer["numNodes"] * trainer["numProcPerNode"] == launch["ranks"]["world_size"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == trainer["numProcPerNode"]
    cmd = trainer["command"][-1]
    (tmp_path / "c.sh").write_text(cmd + "\n")
    assert subprocess.run(["bash", "-n", str(tmp_path / "c.sh")]).returncode == 0
    argv = shlex.split(cmd)
    # the torch plugin's variables (pkg/constants/constants.go TorchEnv*)
    assert argv[argv.index("--rdzv-endpoint") + 1] == "$PET_MASTER_ADDR:$PET_MASTER_PORT"
    for flag, var in (("--nnodes", "$PET_NNODES"), ("--nproc-per-node", "$PET_NPROC_PER_NODE"),
                      ("--node-rank", "$PET_NODE_RANK")):
        assert argv[argv.index(flag) + 1] == var


def test_cpu_plan_requests_cpus_not_gpus():
    cpu = _plan({"name": "tiny", "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "num_kv_heads": 2,
                 "ffn_hidden_size": 128, "vocab_size": 256, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
                 "tie_embeddings": False}, dp=2, tp=1, pp=1, zero=0, nmb=2, gpus_per_node=2, seq=16)
    cpu["cluster"]["gpu"] = "cpu"
    launch = emit(cpu)
    for target in ("trainjob", "kubernetes"):
        text = launch[target]["yaml"]
        assert "nvidia.com/gpu" not in text and "planner.runtime" in text and "pretrain_gpt.py" not in text
    assert launch["trainjob"]["manifest"]["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"cpu": "2"}
    script = launch["slurm"]["script"]
    assert "--gpus" not in script and "#SBATCH --cpus-per-task=2" in script and "planner.runtime" in script


def test_layer_list_plan_has_no_trainjob():
    assert "transformers only" in emit(LAYERS_PLAN, ["trainjob"])["skipped"]["trainjob"]
