"""Issue 18: OpenAI's own OpenAPI description as an outside conformance suite.

schemathesis generates requests from ``shared/specs/openai-openapi.yaml`` for
the doors' endpoints and the model routes, and sends them to a real gateway
on the demo fleet: not one may answer 5xx. Bounded in examples and time.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import SHARED, base_config, run_gateway

SPEC = SHARED / "specs" / "openai-openapi.yaml"
PATHS = r"^/(responses|embeddings|completions|models|models/\{model\}|chat/completions)$"


@pytest.mark.timeout(300)
def test_no_generated_request_gets_a_server_error(sim_url: str) -> None:
    if not SPEC.exists():
        pytest.skip("schemathesis or the spec is missing")
    config = base_config(sim_url)
    config["models"] += [
        {"name": "embedder", "backend": "simulated", "kind": "embedding",
         "aliases": ["text-embedding-3-small", "text-embedding-ada-002"], "max_output_tokens": 1,
         "price": {"input_per_mtok": 0.02, "output_per_mtok": 0},
         "simulate": {"prefill_tokens_per_s": 1_000_000}},
        {"name": "writer", "backend": "simulated",
         "aliases": ["gpt-4o", "gpt-4o-mini", "gpt-3.5-turbo-instruct", "o3"],
         "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.2},
         "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000, "output_tokens_mean": 8}}]
    with run_gateway(config) as gw:
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "run", str(SPEC), "--url", gw.base_url,
             "-H", "Authorization: Bearer sk-test-key", "--include-path-regex", PATHS,
             "--checks", "not_a_server_error", "-n", "15", "--max-time", "45",
             "--phases", "examples,coverage,fuzzing", "--workers", "1", "--seed", "18"],
            capture_output=True, text=True, timeout=360)
        report = run.stdout[-4000:]
        assert run.returncode == 0, report
        assert "generated" in report and " failed" not in report.split("Test cases:")[-1], report
        assert "Traceback" not in gw.log()
