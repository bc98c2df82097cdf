"""The request log and /metrics of a real gateway: trace headers upstream, one
``request.completed`` event per request with every decision field, no secrets."""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from core.config import LoggingConfig
from gateway.observe.request_log import LogFile, RequestLog
from gateway.pipeline.outcome import Outcome
from tests.support import OTHER_KEY, TEST_KEY, base_config, run_gateway, run_simulator

ADMIN_KEY = "sk-admin-telemetry-test-0123456789"
UPSTREAM_KEY = "sk-upstream-secret-abcdefghijkl"
PROMPT = "the quick brown fox telemetry-probe"
ANSWER = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                       "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:  # http.server's naming
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def recording_upstream() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A real HTTP upstream that keeps the headers of every request it gets."""
    seen: list[dict[str, str]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()


def _events(path: Path, request_id: str) -> list[dict]:
    """The events of one request, once the batched log has written them."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        events = [json.loads(x) for x in lines if request_id in x]
        if events:
            return events
        time.sleep(0.05)
    raise AssertionError(f"no event of {request_id} in {path}")


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple]:
    with run_simulator() as sim, recording_upstream() as (upstream, seen):
        config = base_config(sim)
        config["models"].append({"name": "recorded", "backend": "openai_compat",
                                 "base_url": upstream, "api_key_env": "RG_TEST_UPSTREAM_KEY",
                                 "price": {"input_per_mtok": 1, "output_per_mtok": 2}})
        env = {"ROUTEGATE_ADMIN_KEY": ADMIN_KEY, "RG_TEST_UPSTREAM_KEY": UPSTREAM_KEY}
        with run_gateway(config, env=env) as gw:
            yield gw, seen, Path(yaml.safe_load(gw.config_path.read_text())["data_dir"])


def _chat(gw, model: str, key: str = TEST_KEY, **headers: str) -> httpx.Response:
    r = httpx.post(gw.url + "/v1/chat/completions", headers={
        "authorization": f"Bearer {key}", **headers}, json={
        "model": model, "max_tokens": 4, "messages": [{"role": "user", "content": PROMPT}]})
    assert r.status_code == 200, r.text
    return r


def test_request_id_and_traceparent_go_upstream(traced: tuple) -> None:
    gw, seen, _ = traced
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    _chat(gw, "recorded", **{"x-request-id": "client-req-1",
                             "traceparent": f"00-{trace_id}-{parent}-01"})
    sent = seen[-1]
    assert sent["x-request-id"] == "client-req-1"
    version, tid, span, flags = sent["traceparent"].split("-")
    assert (version, tid, flags) == ("00", trace_id, "01") and span != parent
    r = _chat(gw, "recorded")
    sent = seen[-1]
    assert sent["x-request-id"] == r.headers["x-routegate-request-id"]
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", sent["traceparent"])
    assert sent["traceparent"].split("-")[1] != trace_id


def test_one_event_per_request_with_every_decision_field(traced: tuple) -> None:
    gw, _, data_dir = traced
    r = _chat(gw, "auto", **{"x-request-id": "client-req-fields"})
    rid = r.headers["x-routegate-request-id"]
    file = data_dir / "logs" / "requests.jsonl"
    events = _events(file, rid)
    assert len(events) == 1
    e = events[0]
    for name in ("team", "key_id", "pool", "model", "reason", "attempts", "escalations",
                 "fallbacks", "predicted_quality", "confidence", "prompt_tokens",
                 "completion_tokens", "cost_usd", "energy_j", "ttft_s", "tpot_s", "latency_s",
                 "status", "trace_id", "timestamp", "classify_s"):
        assert name in e, name
    assert e["team"] == "test" and e["status"] == 200 and e["attempts"] == 1
    assert e["client_request_id"] == "client-req-fields" and e["cost_usd"] > 0
    assert "prompt" not in e and PROMPT not in file.read_text()
    # stderr carries the same event (JSON: not a TTY)
    assert any(rid in line and "request.completed" in line for line in gw.log().splitlines())


def test_no_key_or_secret_is_logged(traced: tuple) -> None:
    gw, _, data_dir = traced
    _chat(gw, "recorded")
    _chat(gw, "fast", key=OTHER_KEY)
    httpx.post(gw.url + "/v1/chat/completions", headers={"authorization": "Bearer sk-wrong-1"},
               json={"model": "fast", "messages": []})
    httpx.post(gw.url + "/ui/login", data={"key": ADMIN_KEY})
    httpx.post(gw.url + "/ui/login", data={"key": "sk-wrong-admin-guess"})
    httpx.get(gw.url + "/admin/overview", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    time.sleep(0.3)   # one flush of the batched log
    logs = gw.log() + "".join(p.read_text() for p in (data_dir / "logs").glob("requests*"))
    assert "request.completed" in logs
    for secret in (TEST_KEY, OTHER_KEY, ADMIN_KEY, UPSTREAM_KEY, "sk-wrong-admin-guess"):
        assert secret not in logs


def test_metrics_are_complete_and_bounded(traced: tuple) -> None:
    gw, _, _ = traced
    _chat(gw, "fast")
    text = httpx.get(gw.url + "/metrics").text
    for name in ("routegate_requests_total", "routegate_request_duration_seconds_bucket",
                 "routegate_ttft_seconds_bucket", "routegate_itl_seconds",
                 "routegate_queue_wait_seconds", "routegate_classifier_seconds",
                 "routegate_tokens_total", "routegate_cost_usd_total",
                 "routegate_energy_joules_total", "routegate_escalations_total",
                 "routegate_fallbacks_total", "routegate_breaker_state",
                 "routegate_in_flight", "routegate_queue_depth",
                 "routegate_budget_remaining_usd", "routegate_batch_lines",
                 "routegate_budget_journal_quarantined_total"):
        assert name in text, name
    assert 'routegate_ttft_seconds_bucket{le="0.01",model="fast",pool="interactive"}' in text \
        or re.search(r'routegate_ttft_seconds_bucket\{[^}]*le="0.01"', text)
    assert re.search(r'routegate_ttft_seconds_bucket\{[^}]*le="120.0"', text)
    # The classifier's budget is 1 ms at p99: its buckets read below it.
    assert 'routegate_classifier_seconds_bucket{le="0.001"}' in text
    assert 'routegate_classifier_seconds_bucket{le="0.00025"}' in text
    # Each model's provider, to join on for per-provider sums.
    assert re.search(r'routegate_model_info\{model="fast",provider="openai_compat",'
                     r'upstream_model="[^"]+"\} 1\.0', text), text[:2000]
    labels = set(re.findall(r'[{,](\w+)="', text))
    assert not labels & {"key", "key_id", "request_id", "trace_id"}, labels


def _log(tmp_path: Path, tty: bool, **config: object) -> tuple[RequestLog, io.BytesIO]:
    stderr = io.BytesIO()
    file = LogFile(tmp_path / "logs" / "requests.jsonl", 1 << 20, 1)
    return RequestLog(LoggingConfig(**config), file, stderr=stderr, tty=tty), stderr  # type: ignore[arg-type]


def _done(**kw: object) -> Outcome:
    return Outcome("req_1", team="search", key="ci-key", model="small", reason="cheapest-fit",
                   prompt=[{"role": "user", "content": PROMPT}], **kw)  # type: ignore[arg-type]


def test_console_on_a_tty_json_otherwise(tmp_path: Path) -> None:
    log, stderr = _log(tmp_path, tty=True)
    log.completed(_done())
    log.close()
    console = stderr.getvalue().decode()
    assert "request.completed" in console and not console.lstrip().startswith("{")
    [line] = (tmp_path / "logs" / "requests.jsonl").read_text().splitlines()
    assert json.loads(line)["key_id"] == "ci-key"
    log, stderr = _log(tmp_path / "plain", tty=False)
    log.completed(_done())
    log.close()
    assert json.loads(stderr.getvalue())["event"] == "request.completed"


def test_prompts_only_when_opted_in(tmp_path: Path) -> None:
    log, stderr = _log(tmp_path, tty=False)
    log.completed(_done())
    log, opted = _log(tmp_path / "opted", tty=False, prompts=True)
    log.completed(_done())
    assert PROMPT not in stderr.getvalue().decode()
    assert json.loads(opted.getvalue())["prompt"][0]["content"] == PROMPT
