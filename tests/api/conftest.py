"""Live-server fixtures: a real uvicorn subprocess on a free loopback port, spoken to over
HTTP, on SQLite (a temp dir) or on PostgreSQL (a throwaway database per test session)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]

SMALL = {
    "model": {"name": "llama3-8b"},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "training": {"global_batch_size": 32, "seq_length": 2048},
}
# with the distributed optimizer, as Megatron runs Llama 3 8B on 80 GB parts (without it
# 18 bytes per parameter leave no room on tp=2: cost_model/engines/support.py MEGATRON)
PARALLELISM = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "zero": 1}


def small_plan(batch: int = 32, **search) -> dict:
    req = {**SMALL, "training": {**SMALL["training"], "global_batch_size": batch}}
    req["search"] = {"time_limit_s": 10, **search}
    return req





def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, env: dict[str, str], cwd: Path):
        self.env = env
        self.cwd = cwd
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = cwd / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30) -> Server:
        return self.launch().wait_ready(timeout_s)

    def launch(self) -> Server:
        env = {**os.environ, **self.env, "PYTHONPATH": str(ROOT)}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host", "127.0.0.1",
                 "--port", str(self.port), "--log-level", "warning"],
                cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout_s: float = 30) -> Server:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server did not come up: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def make_server(tmp_path):
    servers: list[Server] = []

    def make(wait: bool = True, **env: str) -> Server:
        base = {"PLANNER_DATA_DIR": str(tmp_path)}
        s = Server({**base, **env}, tmp_path)
        servers.append(s)
        s.launch()
        return s.wait_ready() if wait else s

    yield make
    for s in servers:
        s.stop()


TOKEN = "test-token-123"


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One SQLite server with auth on, shared by the read-mostly tests."""
    d = tmp_path_factory.mktemp("srv")
    s = Server({"PLANNER_DATA_DIR": str(d), "PLANNER_API_TOKEN": TOKEN}, d).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
        yield c


def _postgres_admin_url() -> str | None:
    """A reachable PostgreSQL (PLANNER_TEST_POSTGRES_URL, else 127.0.0.1:5432 database `test`
    as postgres or root with trust auth), or None."""
    try:
        import psycopg
    except ImportError:
        return None
    candidates = [os.environ["PLANNER_TEST_POSTGRES_URL"]] if os.environ.get("PLANNER_TEST_POSTGRES_URL") else [
        "postgresql://postgres@127.0.0.1:5432/test", "postgresql://root@127.0.0.1:5432/test"]
    for url in candidates:
        try:
            with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), connect_timeout=2):
                return url.replace("postgresql+psycopg://", "postgresql://")
        except Exception:  # noqa: BLE001 - try the next candidate
            continue
    return None


@pytest.fixture(scope="session")
def postgres_url():
    """A fresh database per test session (dropped afterwards), so runs never collide."""
    admin = _postgres_admin_url()
    if admin is None:
        pytest.skip("PostgreSQL not reachable at 127.0.0.1:5432 (or PLANNER_TEST_POSTGRES_URL)")
    import psycopg

    name = f"planner_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin.rpartition("/")
    yield f"{base.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
