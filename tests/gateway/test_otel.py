"""Optional OpenTelemetry traces (issue 13, item 5): a real gateway exporting
OTLP/HTTP to a real receiver on loopback, a real upstream that keeps the
traceparent it got, and the off switch that imports nothing."""

from __future__ import annotations

import contextlib
import gzip
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from pydantic import ValidationError

from core.otel_config import OtelConfig
from gateway.observe.otel import NO_SPAN, NOOP, start_tracer
from gateway.observe.tracing import TraceContext
from tests.support import REPO, TEST_KEY, Gateway, base_config, child_env, run_gateway

AUTH = {"authorization": f"Bearer {TEST_KEY}"}
ASK = [{"role": "user", "content": "Give me the weather in Oslo as JSON."}]
SERVER = 2   # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER


class _Handler(BaseHTTPRequestHandler):
    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        return gzip.decompress(raw) if self.headers.get("content-encoding") == "gzip" else raw

    def log_message(self, *args: object) -> None:
        pass


class _Collector(_Handler):
    """An OTLP/HTTP receiver: ``POST /v1/traces``, protobuf."""

    spans: list[dict[str, Any]]

    def do_POST(self) -> None:  # http.server's naming
        request = ExportTraceServiceRequest.FromString(self._body())
        for rs in request.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append({
                        "name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                        "attributes": _attributes(s.attributes), "status": s.status.code,
                        "resource": resource, "path": self.path})
        self._reply(200, ExportTraceServiceResponse().SerializeToString(),
                    "application/x-protobuf")


class _Upstream(_Handler):
    """An OpenAI-compatible upstream: model ``bad`` answers prose, any other JSON."""

    seen: list[dict[str, str]]

    def do_POST(self) -> None:
        body = json.loads(self._body())
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        content = "sunny, I think" if body["model"] == "bad" else '{"city": "Oslo", "temp": 7}'
        answer = {"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}}
        self._reply(200, json.dumps(answer).encode(), "application/json")


def _attributes(kvs: Any) -> dict[str, Any]:
    out = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


@contextlib.contextmanager
def serve(handler: type[_Handler], **state: list) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (handler,), state))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def remote(name: str, upstream: str, wire: str, price: float, ability: float) -> dict:
    return {"name": name, "backend": "openai_compat", "base_url": upstream + "/v1",
            "upstream_model": wire, "ability": ability,
            "price": {"input_per_mtok": price, "output_per_mtok": price * 2}}


@pytest.fixture(scope="module")
def traced(sim_url: str) -> Iterator[tuple[Gateway, list[dict], list[dict]]]:
    spans: list[dict] = []
    seen: list[dict] = []
    with serve(_Collector, spans=spans) as collector, serve(_Upstream, seen=seen) as upstream:
        config = base_config(sim_url, routing={"auto_policy": "cheapest"},
                             otel={"endpoint": collector, "service_name": "rg-otel-test"})
        config["models"] += [remote("small", upstream, "bad", 0.1, 0.5),
                             remote("medium", upstream, "good", 1.0, 0.7),
                             remote("large", upstream, "good", 5.0, 0.9)]
        config["teams"][0]["allowed_models"] = ["small", "medium", "large"]
        # Export every 50 ms rather than every 5 s, so the test does not wait.
        with run_gateway(config, env={"OTEL_BSP_SCHEDULE_DELAY": "50"}) as gw:
            yield gw, spans, seen


def _post(gw: Gateway, body: dict, **headers: str) -> httpx.Response:
    r = httpx.post(gw.base_url + "/chat/completions", json={"messages": ASK, **body},
                   headers={**AUTH, **headers}, timeout=30)
    assert r.status_code == 200, r.text
    return r


def _tree(spans: list[dict], request_id: str) -> tuple[dict, list[dict]]:
    """The request's span and its children, once the batch has been exported."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        roots = [s for s in list(spans)
                 if s["attributes"].get("routegate.request_id") == request_id]
        if roots:
            children = [s for s in list(spans) if s["parent"] == roots[0]["span_id"]]
            if any(c["name"] == "settle" for c in children):
                return roots[0], children
        time.sleep(0.05)
    raise AssertionError(f"no exported span tree for {request_id}")


def test_one_request_is_a_span_tree_in_the_clients_trace(traced: tuple) -> None:
    gw, spans, seen = traced
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    r = _post(gw, {"model": "medium"}, traceparent=f"00-{trace_id}-{parent}-01")
    root, children = _tree(spans, r.headers["x-routegate-request-id"])
    assert root["name"] == "chat.completion" and root["kind"] == SERVER
    assert (root["trace_id"], root["parent"]) == (trace_id, parent)
    assert root["resource"]["service.name"] == "rg-otel-test" and root["path"] == "/v1/traces"
    assert [c["name"] for c in children] == ["classify", "reserve", "upstream.attempt", "settle"]
    assert all(c["trace_id"] == trace_id for c in children)
    a = root["attributes"]
    assert (a["routegate.team"], a["routegate.pool"], a["routegate.model"]) == (
        "test", "interactive", "medium")
    assert (a["http.response.status_code"], a["routegate.attempts"]) == (200, 1)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (12, 9)
    assert a["routegate.cost_usd"] > 0
    assert TEST_KEY not in repr(spans) and "Oslo" not in repr(spans)
    attempt = children[2]
    assert attempt["attributes"] == {"routegate.model": "medium", "routegate.outcome": "ok"}
    # The upstream's parent is the attempt span, not the gateway's own generated id.
    assert seen[-1]["traceparent"] == f"00-{trace_id}-{attempt['span_id']}-01"


def test_an_escalated_request_has_one_span_per_attempt(traced: tuple) -> None:
    gw, spans, seen = traced
    before = len(seen)
    r = _post(gw, {"model": "auto", "response_format": {"type": "json_object"}})
    assert r.headers["x-routegate-attempts"] == "small:invalid_json,medium:ok"
    root, children = _tree(spans, r.headers["x-routegate-request-id"])
    attempts = [c for c in children if c["name"] == "upstream.attempt"]
    assert [(c["attributes"]["routegate.model"], c["attributes"]["routegate.outcome"])
            for c in attempts] == [("small", "invalid_json"), ("medium", "ok")]
    assert root["attributes"]["routegate.attempts"] == 2
    sent = [h["traceparent"].split("-") for h in seen[before:]]
    assert [tp[:3] for tp in sent] == [["00", root["trace_id"], c["span_id"]] for c in attempts]
    # A new trace's flags are "03": sampled, and (W3C level 2) a random trace id.
    assert all(int(tp[3], 16) & 1 for tp in sent)


def test_a_new_trace_is_the_one_in_the_request_log(traced: tuple) -> None:
    gw, spans, _ = traced
    r = _post(gw, {"model": "medium"})
    rid = r.headers["x-routegate-request-id"]
    root, _ = _tree(spans, rid)
    assert root["parent"] == ""
    data_dir = Path(yaml.safe_load(gw.config_path.read_text())["data_dir"])
    log = data_dir / "logs" / "requests.jsonl"
    deadline = time.monotonic() + 5
    while rid not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    event = next(json.loads(x) for x in log.read_text().splitlines() if rid in x)
    assert event["trace_id"] == root["trace_id"]


def test_off_by_default_is_the_no_op() -> None:
    assert OtelConfig().endpoint is None and start_tracer(OtelConfig()) is NOOP
    span = NOOP.start_request({"traceparent": f"00-{'a' * 32}-{'b' * 16}-01"})
    assert span is NO_SPAN and span.child("classify") is NO_SPAN and span.trace_id is None
    trace = TraceContext.from_headers({})
    assert span.upstream_headers(trace, "r1") == trace.upstream_headers("r1")


def test_the_endpoint_gets_otlps_path_and_typos_fail() -> None:
    assert OtelConfig(endpoint="http://c:4318").endpoint == "http://c:4318/v1/traces"
    assert OtelConfig(endpoint="http://c:4318/x/traces").endpoint == "http://c:4318/x/traces"
    with pytest.raises(ValidationError):
        OtelConfig(endpoint="c:4318")
    with pytest.raises(ValidationError):
        OtelConfig.model_validate({"endpiont": "http://c:4318"})


def test_when_off_the_gateway_never_imports_the_sdks_tracer() -> None:
    # redis-py imports opentelemetry.sdk.metrics by itself when the SDK is
    # installed; what must stay out is ours: the tracer, the exporter.
    code = ("import sys, gateway.app; from core.config import parse_config;"
            "from gateway.observe.otel import start_tracer;"
            "start_tracer(parse_config({'models': [{'name': 'm', 'price': "
            "{'input_per_mtok': 1, 'output_per_mtok': 1}}]}).otel);"
            "print([m for m in sys.modules if m.startswith(('gateway.observe.otel_sdk', "
            "'opentelemetry.sdk.trace', 'opentelemetry.exporter'))])")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_an_endpoint_without_the_sdk_stops_the_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gateway.observe.otel_sdk", None)   # as if the extra were missing
    with pytest.raises(RuntimeError, match=r"routegate\[otel\]"):
        start_tracer(OtelConfig(endpoint="http://127.0.0.1:4318"))
