"""Property-based API fuzzing with schemathesis against a running service.

    python bench/schemathesis_run.py http://127.0.0.1:8000 --examples 200 [--token T]

Generates requests for every operation in /openapi.json and checks that no response is a
5xx and every response matches its documented schema (status code, content type, body).
tests/api/test_schemathesis.py runs `run()` with a small budget (>= 500 requests)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import given as hyp_given
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance)


@dataclass
class Report:
    requests: int = 0
    by_operation: dict[str, int] = field(default_factory=dict)
    by_status: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


# heavier budget on cheap operations; the solver-backed ones mostly answer 422 fast anyway
WEIGHTS = {"POST /v1/plans": 0.6, "POST /v1/check": 0.6}


def run(base_url: str, examples: int = 60, token: str | None = None, seed: int = 0) -> Report:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # the description is behind the token too when the service has one
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", headers=headers)
    report = Report()
    start = time.perf_counter()
    for result in schema.get_all_operations():
        op = result.ok()
        label = f"{op.method.upper()} {op.path}"
        if op.path == "/metrics":
            continue  # plain text, not JSON; exercised by the integration tests
        n = max(5, int(examples * WEIGHTS.get(label, 1.0)))
        # positive: schema-valid inputs (deep in the cost model); negative: schema-breaking
        # ones (must be rejected with 4xx, never crash)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz_operation(op, label, n, mode, base_url, headers, report, seed)
    report.seconds = time.perf_counter() - start
    return report


def _fuzz_operation(op, label: str, n: int, mode, base_url: str, headers: dict, report: Report, seed: int) -> None:
    @settings(max_examples=n, deadline=None, database=None, derandomize=seed == 0,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate],
              print_blob=False)
    @hyp_given(case=op.as_strategy(generation_mode=mode))
    def one(case):
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        report.requests += 1
        report.by_operation[label] = report.by_operation.get(label, 0) + 1
        report.by_status[response.status_code] = report.by_status.get(response.status_code, 0) + 1
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except Exception as exc:  # noqa: BLE001 - collected, reported at the end
            report.failures.append(f"{label} -> {response.status_code}: {str(exc)[:800]}")

    try:
        one()
    except Unsatisfiable:
        pass  # no way to break the schema of an operation without inputs (negative mode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base_url")
    ap.add_argument("--examples", type=int, default=200, help="generated cases per operation")
    ap.add_argument("--token")
    ap.add_argument("--seed", type=int, default=0, help="0: deterministic; other: random generation")
    a = ap.parse_args()
    r = run(a.base_url.rstrip("/"), a.examples, a.token, a.seed)
    print(f"{r.requests} requests in {r.seconds:.1f} s; statuses {dict(sorted(r.by_status.items()))}")
    for op, n in sorted(r.by_operation.items()):
        print(f"  {n:6d}  {op}")
    for f in r.failures[:50]:
        print("FAIL", f)
    print(f"{len(r.failures)} failures")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
