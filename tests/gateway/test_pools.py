"""Which pool a request runs in: the x-routegate-pool header within the team's
``allowed_pools``, else the key's ``default_pool``, else the team's, else
interactive; and a batch-pool request is billed at the batch price."""

from __future__ import annotations

import json
import time
from pathlib import Path

import openai
import pytest
from pydantic import ValidationError

from core.config import GatewayConfig, KeyConfig, PoolName, TeamConfig
from core.errors import InvalidRequest, PermissionDenied
from gateway.auth import Caller
from gateway.pipeline.pools import request_pool
from tests.support import TEST_KEY, base_config, hashed, run_gateway

BATCH_KEY = "sk-test-batch-default"
KEY_HASH = hashed("sk-a")


def caller(key_default: PoolName | None = None, team_default: PoolName | None = None,
           allowed: list[PoolName] | None = None) -> Caller:
    key = KeyConfig(hash=KEY_HASH, default_pool=key_default)
    team = TeamConfig(name="t", keys=[key], allowed_pools=allowed, default_pool=team_default)
    return Caller(team, key)


def test_the_header_wins_within_the_allowed_pools() -> None:
    assert request_pool(caller(), {}) == "interactive"
    assert request_pool(caller(), {"x-routegate-pool": "batch"}) == "batch"
    assert request_pool(caller(key_default="batch"), {"x-routegate-pool": "interactive"}) == \
        "interactive"
    with pytest.raises(PermissionDenied):
        request_pool(caller(allowed=["interactive"]), {"x-routegate-pool": "batch"})
    with pytest.raises(InvalidRequest):
        request_pool(caller(), {"x-routegate-pool": "bulk"})


def test_without_a_header_the_key_default_then_the_team_default() -> None:
    assert request_pool(caller(key_default="batch"), {}) == "batch"
    assert request_pool(caller(team_default="batch"), {}) == "batch"
    assert request_pool(caller(key_default="interactive", team_default="batch"), {}) == \
        "interactive"
    assert request_pool(caller(allowed=["batch"]), {}) == "batch"   # the only pool it may use


def test_a_default_outside_the_allowed_pools_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="default_pool 'batch' is not in allowed_pools"):
        caller(team_default="batch", allowed=["interactive"])
    with pytest.raises(ValidationError, match="key .* default_pool 'batch'"):
        caller(key_default="batch", allowed=["interactive"])
    caller(team_default="batch")     # no allowed_pools: every pool is allowed


def _event(path: Path, request_id: str) -> dict:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        found = [json.loads(x) for x in lines if request_id in x]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no event of {request_id} in {path}")


def test_a_key_whose_default_is_batch_runs_and_is_billed_there(tmp_path: Path) -> None:
    config = base_config("http://127.0.0.1:9/v1")    # only its in-process model is used
    config["models"] = [m for m in config["models"] if m["name"] == "local"]
    config["teams"] = [{"name": "test", "keys": [
        hashed(TEST_KEY), {"hash": hashed(BATCH_KEY), "default_pool": "batch"}]}]
    config["data_dir"] = str(tmp_path / "data")
    per_token = {}
    with run_gateway(config) as gw:
        for key in (TEST_KEY, BATCH_KEY):
            client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="local", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
            usage = raw.parse().usage
            assert usage is not None
            event = _event(tmp_path / "data" / "logs" / "requests.jsonl",
                           raw.headers["x-routegate-request-id"])
            per_token[event["pool"]] = event["cost_usd"] / usage.total_tokens
    assert set(per_token) == {"interactive", "batch"}
    multiplier = GatewayConfig.model_validate(config).pools.batch.price_multiplier
    assert multiplier < 1
    assert per_token["batch"] == pytest.approx(per_token["interactive"] * multiplier, rel=1e-3)
