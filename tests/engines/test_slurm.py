"""The emitted sbatch script of a 2-process `cpu` plan runs on a real Slurm.

slurmctld and slurmd (Debian's slurm-wlm, 22.05) are started on localhost from a slurm.conf
written into a temp dir (one node, CPUs=2), with munged on a private socket and a fresh key.
The job must reach COMPLETED, and the losses the runtime prints must equal what the runtime's
`--check` compares against: planner.runtime.train.run_reference on the same plan, steps and
seed (rtol 1e-4, the --check default).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.launch import write_artifacts
from planner.service import plan as make_plan

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "scontrol")
pytestmark = pytest.mark.skipif(
    any(shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists() for d in DAEMONS),
    reason="Slurm/munge are not installed (apt-get install slurmctld slurmd slurm-client munge)",
)
TINY = {"transformer": {"name": "tiny-llama", "num_layers": 4, "hidden_size": 32, "num_attention_heads": 4,
                        "num_kv_heads": 2, "ffn_hidden_size": 64, "vocab_size": 128, "mlp": "swiglu"}}
REQUEST = {"model": TINY, "cluster": {"gpu": "cpu", "num_gpus": 2, "gpus_per_node": 2},
           "training": {"global_batch_size": 4, "seq_length": 16, "dtype": "fp32"},
           # two data-parallel processes: a plan the runtime runs (an unpinned search may pick
           # pp=2 with one micro-batch, which the runtime refuses before launch; see skipped)
           "search": {"dp": 2}}
STEPS, SEED, RTOL = 3, 0, 1e-4  # the runtime's defaults (planner/runtime/__main__.py)


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _conf(d: Path, ctl_port: int, slurmd_port: int) -> str:
    return f"""ClusterName=pptest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctl_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture
def slurm(tmp_path):
    d = tmp_path / "slurm"
    for sub in ("state", "spool"):
        (d / sub).mkdir(parents=True)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ctl_port, slurmd_port = _free_ports(2)
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, ctl_port, slurmd_port))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs = []
    try:
        subprocess.run([_bin("munged"), "--force", f"--key-file={key}", f"--socket={d}/munge.sock",
                        f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"],
                       check=True, env=env, timeout=20)
        procs.append(subprocess.Popen([_bin("slurmctld"), "-D", "-i", "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen([_bin("slurmd"), "-D", "-N", "localhost", "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = subprocess.run([_bin("sinfo"), "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
            if out.strip() in ("idle", "mixed"):
                break
            time.sleep(0.5)
        else:
            pytest.fail("slurmd did not register: " + (d / "slurmctld.log").read_text()[-2000:]
                        + (d / "slurmd.log").read_text()[-2000:])
        yield env, d
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([_bin("munged"), f"--socket={d}/munge.sock", "--stop"], env=env, capture_output=True)


def _job_state(env: dict, job: str) -> str:
    out = subprocess.run([_bin("scontrol"), "show", "job", job], env=env, capture_output=True, text=True).stdout
    m = re.search(r"JobState=(\w+)", out)
    return m.group(1) if m else "UNKNOWN"


@pytest.mark.slow
def test_cpu_plan_sbatch_completes_with_reference_losses(slurm, tmp_path):
    torch = pytest.importorskip("torch")
    from planner.runtime.plan_io import parse_plan
    from planner.runtime.train import run_reference

    env, d = slurm
    plan = make_plan(REQUEST)
    par = plan["parallelism"]
    assert par["dp"] * par["tp"] * par["pp"] * par["cp"] == 2
    script = plan["launch"]["slurm"]["script"]
    assert "--gpus" not in script and "gres" not in script  # a CPU node has no GPUs to give
    assert "planner.runtime" in script and "pretrain_gpt.py" not in script
    job_dir = tmp_path / "job"
    write_artifacts(plan, job_dir)
    # The job runs this interpreter's torchrun and this tree (sbatch exports the environment).
    job_env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])}
    res = subprocess.run([_bin("sbatch"), "--parsable", f"--chdir={job_dir}", "--output=job.out", "slurm.sbatch"],
                         cwd=job_dir, env=job_env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    state = "PENDING"
    while time.monotonic() < deadline:
        state = _job_state(env, job)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            break
        time.sleep(0.5)
    out = (job_dir / "job.out").read_text() if (job_dir / "job.out").exists() else ""
    assert state == "COMPLETED", f"{state}\n{out[-3000:]}\n{(d / 'slurmd.log').read_text()[-2000:]}"
    losses = [float(x) for x in re.findall(r"step (\d+) loss ([0-9.eE+-]+)", out) for x in [x[1]]]
    assert len(losses) == STEPS, out[-2000:]
    torch.manual_seed(SEED)
    ref, _ = run_reference(parse_plan(json.loads((job_dir / "plan.json").read_text())), STEPS, SEED)
    print(f"slurm job {job} {state}: runtime losses {losses}, reference {ref}")
    for got, want in zip(losses, ref, strict=True):
        assert abs(got - want) <= RTOL * abs(want), (losses, ref)
