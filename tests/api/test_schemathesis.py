"""schemathesis against the live server's /openapi.json: >= 500 generated requests (valid
and schema-breaking), no 5xx, every response within its documented status codes, content
types and schemas. bench/schemathesis_run.py runs the same with a bigger budget."""

from __future__ import annotations

import importlib.util
import sys

from .conftest import ROOT, TOKEN


def _runner():
    spec = importlib.util.spec_from_file_location("schemathesis_run", ROOT / "bench" / "schemathesis_run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_fuzz_no_server_errors_and_schema_conformance(server):
    report = _runner().run(server.url, examples=50, token=TOKEN)
    print(f"schemathesis: {report.requests} requests in {report.seconds:.1f} s, statuses {report.by_status}")
    assert report.requests >= 500, report.by_operation
    assert not any(code >= 500 for code in report.by_status), report.by_status
    assert report.failures == [], "\n".join(report.failures[:10])
