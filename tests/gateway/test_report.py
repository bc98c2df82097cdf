"""``routegate report``: per team and model, from the request log's file and Redis."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from core.config import GatewayConfig, LoggingConfig
from core.durations import parse_since
from gateway.observe.report import build_report, log_files
from gateway.observe.request_log import LogFile, RequestLog
from gateway.pipeline.outcome import Outcome
from tests.support import REPO, TEST_KEY, base_config, child_env, run_gateway, run_simulator


def _write_log(data_dir: Path, outcomes: list[Outcome], max_bytes: int = 1 << 20) -> None:
    file = LogFile(data_dir / "logs" / "requests.jsonl", max_bytes, backups=3)
    log = RequestLog(LoggingConfig(), file, stderr=io.BytesIO(), tty=False)  # type: ignore[arg-type]
    for o in outcomes:
        log.completed(o)   # no event loop: written at once
    log.close()


def _outcome(status: int, cost: float, ttft: float | None = None, **kw: object) -> Outcome:
    return Outcome("req_x", team="search", model="small", status=status, cost_usd=cost,
                   energy_j=2.0, ttft_s=ttft, **kw)  # type: ignore[arg-type]


def _config(data_dir: Path) -> GatewayConfig:
    model = {"name": "small", "backend": "simulated",
             "price": {"input_per_mtok": 1, "output_per_mtok": 1}}
    return GatewayConfig.model_validate({"models": [model], "data_dir": str(data_dir)})


def test_cost_per_completed_task_counts_every_try(tmp_path: Path) -> None:
    outcomes = [_outcome(200, 0.01, ttft=0.1 * (i + 1)) for i in range(10)]
    outcomes += [_outcome(200, 0.03, ttft=0.5, escalations=["invalid_json"]),
                 _outcome(502, 0.02, fallbacks=["upstream_error"]),
                 _outcome(429, 0.0)]
    _write_log(tmp_path, outcomes)
    config = _config(tmp_path)
    report = build_report(config, parse_since("1h"), with_redis=False)
    [row] = report["rows"]
    assert (row["requests"], row["completed"], row["failed"], row["refused"]) == (13, 11, 1, 1)
    assert row["cost_per_completed_usd"] == pytest.approx((0.10 + 0.03 + 0.02) / 11)
    assert row["energy_per_completed_j"] == pytest.approx(26 / 11, abs=1e-3)
    assert row["ttft_p50_s"] == pytest.approx(0.5) and row["ttft_p95_s"] == pytest.approx(1.0)
    assert row["escalation_rate"] == pytest.approx(1 / 13, abs=1e-4)
    assert row["fallback_rate"] == pytest.approx(1 / 13, abs=1e-4)
    assert build_report(config, timedelta(seconds=0), with_redis=False)["rows"] == []


def test_the_report_shows_the_prefix_cache_hit_rate_and_the_response_cache_hits(
        tmp_path: Path) -> None:
    """Per row: prompt tokens the upstream read from its cache, of all prompt tokens
    (issue 47), and the answers given from the team's response cache."""
    _write_log(tmp_path, [
        _outcome(200, 0.01, prompt_tokens=1000, cached_tokens=900, cache_write_tokens=100),
        _outcome(200, 0.01, prompt_tokens=500, cached_tokens=0, response_cache="miss"),
        _outcome(200, 0.0, prompt_tokens=500, cached_tokens=100, response_cache="hit"),
        Outcome("req_y", team="search", model="large", status=200, cost_usd=0.0)])
    report = build_report(_config(tmp_path), parse_since("1h"), with_redis=False)
    large, small = report["rows"]
    assert (small["prompt_tokens"], small["cached_tokens"]) == (2000, 1000)
    assert small["prefix_cache_hit_rate"] == 0.5 and small["response_cache_hits"] == 1
    assert small["cache_write_tokens"] == 100 and small["cache_write_rate"] == 0.05
    assert large["prefix_cache_hit_rate"] is None and large["response_cache_hits"] == 0
    assert report["totals"]["cached_tokens"] == 1000
    assert report["totals"]["cache_write_tokens"] == 100
    assert report["totals"]["response_cache_hits"] == 1

def test_rotated_files_are_read_and_bounded(tmp_path: Path) -> None:
    _write_log(tmp_path, [_outcome(200, 0.001, ttft=0.2) for _ in range(400)], max_bytes=20_000)
    files = log_files(tmp_path)
    assert 2 <= len(files) <= 4          # the live file and at most 3 backups
    assert all(f.stat().st_size < 25_000 for f in files)
    config = _config(tmp_path)
    rows = build_report(config, parse_since("1h"), with_redis=False)["rows"]
    assert 0 < rows[0]["requests"] <= 400


def _report(config_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "report", "--config",
                           str(config_path), "--since", "1h", *args], capture_output=True,
                          text=True, env=child_env(), cwd=REPO, timeout=60, check=True)


def test_report_of_a_running_gateway() -> None:
    with run_simulator() as sim, run_gateway(base_config(sim)) as gw:
        auth = {"authorization": f"Bearer {TEST_KEY}"}
        for model in ("fast", "fast", "fast", "broken"):
            httpx.post(gw.url + "/v1/chat/completions", headers=auth, timeout=30, json={
                "model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
        time.sleep(0.3)    # the batched log's flush
        report = json.loads(_report(gw.config_path, "--json").stdout)
        rows = {(r["team"], r["model"]): r for r in report["rows"]}
        assert {r["pool"] for r in report["rows"]} == {"interactive"}
        fast = rows[("test", "fast")]
        assert (fast["requests"], fast["completed"], fast["failed"]) == (3, 3, 0)
        assert fast["cost_per_completed_usd"] > 0
        broken = rows[("test", "broken")]              # failed: counted under the model tried
        assert (broken["requests"], broken["completed"], broken["failed"]) == (1, 0, 1)
        teams = {t["team"]: t for t in report["teams"]}
        assert teams["test"]["spent_today_usd"] > 0      # from Redis
        table = _report(gw.config_path).stdout
        assert "fast" in table and "$/completed" in table
        data_dir = Path(yaml.safe_load(gw.config_path.read_text())["data_dir"])
        assert (data_dir / "logs" / "requests.jsonl").exists()


def test_report_reads_the_budgets_of_the_embedded_redis() -> None:
    config = base_config("http://127.0.0.1:9/v1", redis_url=None)
    with run_gateway(config, env={"REDIS_URL": ""}) as gw:
        auth = {"authorization": f"Bearer {TEST_KEY}"}
        r = httpx.post(gw.url + "/v1/chat/completions", headers=auth, timeout=30, json={
            "model": "local", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        time.sleep(0.3)
        report = json.loads(_report(gw.config_path, "--json").stdout)
        teams = {t["team"]: t for t in report["teams"]}
        assert teams["test"]["spent_today_usd"] > 0      # from the embedded Redis
