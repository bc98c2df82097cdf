"""/metrics with several workers: every scrape counts the whole server."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import yaml

from gateway.observe.metrics import FLUSH_S
from tests.support import TEST_KEY, base_config, run_gateway, run_simulator

REQUESTS = 40


def _requests_total(text: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(
        r'^routegate_requests_total\{[^}]*team="test"[^}]*\} (\S+)$', text, re.M))


def test_scrapes_sum_all_workers() -> None:
    with run_simulator() as sim, run_gateway(base_config(sim), workers=2) as gw:
        for _ in range(REQUESTS):
            # A new connection each time, so the kernel spreads them over both workers.
            with httpx.Client(headers={"authorization": f"Bearer {TEST_KEY}"}) as http:
                resp = http.post(gw.url + "/v1/chat/completions", json={
                    "model": "fast", "max_tokens": 2,
                    "messages": [{"role": "user", "content": "hi"}]})
                assert resp.status_code == 200, resp.text
        data_dir = Path(yaml.safe_load(gw.config_path.read_text())["data_dir"])
        pids = {p.stem.rsplit("_", 1)[1] for p in (data_dir / "metrics").glob("counter_*.db")}
        assert len(pids) == 2, f"both workers should have counted: {pids}"
        time.sleep(FLUSH_S + 0.5)   # each worker hands its counts over once a second
        totals = {_requests_total(httpx.get(gw.url + "/metrics").text) for _ in range(6)}
        assert totals == {REQUESTS}
