"""Smoke tests of the private internals routegate leans on, pinned in pyproject.toml.

- prometheus_client (``~=0.26.0``): ``PendingHistogram`` (gateway/observe/metric_batch.py)
  reads a Histogram child's ``_upper_bounds`` and adds to its ``_buckets[i]`` and
  ``_sum`` with ``.inc``;
- uvicorn (``~=0.54.0``): ``LimitedProtocol`` (gateway/server.py) subclasses
  ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol``, uses its
  ``STATUS_LINE``, overrides some of its methods and reads its per-connection state.

A failure names the attribute that moved: read the new release before raising a pin.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.observe.metric_batch import PendingCounter, PendingHistogram
from gateway.observe.metrics import LLM_BUCKETS
from tests.support import REPO, child_env, free_port

PROM = f"prometheus_client {importlib.metadata.version('prometheus-client')}"
UVICORN = f"uvicorn {importlib.metadata.version('uvicorn')}"
# The HttpToolsProtocol methods LimitedProtocol overrides (each calls super()).
OVERRIDDEN = {"__init__", "connection_made", "connection_lost", "data_received",
              "on_headers_complete", "on_message_complete"}
# HttpToolsProtocol state LimitedProtocol reads, and what it reads of its cycle.
PROTOCOL_STATE = ("loop", "logger", "transport", "scope", "cycle", "pipeline")
CYCLE_STATE = ("response_complete", "response_started", "keep_alive", "scope")
# Values on and around the bucket bounds, past the last one, and zero.
VALUES = (0.0, 0.01, 0.0100001, 0.3, 1.0, 1.5, 119.9, 120.0, 121.0, 1e6)


def need(obj: Any, attr: str, where: str) -> Any:
    if not hasattr(obj, attr):
        pytest.fail(f"{where} has no {attr!r} any more; {pin_note(where)}")
    return getattr(obj, attr)


def pin_note(where: str) -> str:
    if where.startswith("prometheus_client"):
        return "gateway/observe/metric_batch.py (PendingHistogram) uses it: see the pin in " \
               "pyproject.toml"
    return "gateway/server.py (LimitedProtocol) uses it: see the pin in pyproject.toml"


def rendered(registry: CollectorRegistry) -> str:
    """The exposition text without ``_created`` lines (time stamps of creation)."""
    return "\n".join(line for line in generate_latest(registry).decode().splitlines()
                     if "_created" not in line)


@pytest.mark.parametrize("labelled", [True, False])
def test_a_histogram_child_has_bounds_buckets_and_sum(labelled: bool) -> None:
    hist = Histogram("rg_probe_seconds", "probe", ["pool"] if labelled else [],
                     buckets=LLM_BUCKETS, registry=CollectorRegistry())
    child = hist.labels("interactive") if labelled else hist    # metrics.py holds both kinds
    where = f"{PROM}: a Histogram {'child' if labelled else '(no labels)'}"
    bounds = need(child, "_upper_bounds", where)
    assert list(bounds) == [*map(float, LLM_BUCKETS), math.inf], \
        f"{where}: _upper_bounds is no longer the sorted bounds ending in +Inf: {bounds!r}"
    buckets = need(child, "_buckets", where)
    assert len(buckets) == len(bounds), f"{where}: _buckets is not one value per bound"
    for value in (buckets[0], need(child, "_sum", where)):
        assert callable(getattr(value, "inc", None)), \
            f"{where}: {type(value).__name__} in _buckets/_sum has no inc(); {pin_note(PROM)}"
    PendingHistogram(child)    # reads _upper_bounds


def test_pending_histogram_flush_renders_as_observe() -> None:
    direct, batched = CollectorRegistry(), CollectorRegistry()

    def family(registry: CollectorRegistry) -> tuple[Histogram, Histogram, Counter]:
        return (Histogram("rg_wait_seconds", "w", ["model"], buckets=LLM_BUCKETS,
                          registry=registry),
                Histogram("rg_classify_seconds", "c", [], buckets=LLM_BUCKETS,
                          registry=registry),
                Counter("rg_requests", "r", ["model"], registry=registry))

    wait, classify, requests = family(direct)
    pending_wait, pending_classify, pending_requests = family(batched)
    pending = (PendingHistogram(pending_wait.labels("fast")), PendingHistogram(pending_classify),
               PendingCounter(pending_requests.labels("fast")))
    for round_ in (VALUES, VALUES[::3], ()):     # flushed three times: counts start again
        for v in round_:
            wait.labels("fast").observe(v)
            classify.observe(v)
            requests.labels("fast").inc()
            pending[0].observe(v)
            pending[1].observe(v)
            pending[2].inc()
        for p in pending:
            p.flush()
        assert rendered(batched) == rendered(direct), \
            f"{PROM}: PendingHistogram.flush no longer matches Histogram.observe"


MULTIPROCESS = """
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from gateway.observe.metric_batch import PendingHistogram
from gateway.observe.metrics import LLM_BUCKETS
values = {values!r}
direct = Histogram("rg_direct_seconds", "h", ["model"], buckets=LLM_BUCKETS)
pending = PendingHistogram(Histogram("rg_pending_seconds", "h", ["model"],
                                     buckets=LLM_BUCKETS).labels("fast"))
for v in values:
    direct.labels("fast").observe(v)
    pending.observe(v)
pending.flush()
registry = CollectorRegistry()
MultiProcessCollector(registry)
print(generate_latest(registry).decode())
"""


def test_pending_histogram_flush_matches_observe_with_workers(tmp_path: Path) -> None:
    """``--workers N``: the values are memory-mapped files, summed at a scrape."""
    done = subprocess.run([sys.executable, "-c", MULTIPROCESS.format(values=VALUES)],
                          cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=child_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    direct = sorted(line for line in lines if "rg_direct" in line)
    batched = sorted(line.replace("rg_pending", "rg_direct") for line in lines
                     if "rg_pending" in line)
    assert any("_bucket{" in line for line in direct), done.stdout
    assert batched == direct, f"{PROM}, multiprocess: PendingHistogram.flush differs"


def test_http_tools_protocol_has_what_limited_protocol_overrides() -> None:
    from uvicorn.protocols.http import httptools_impl

    from gateway.server import LimitedProtocol

    where = f"{UVICORN}: uvicorn.protocols.http.httptools_impl"
    base = need(httptools_impl, "HttpToolsProtocol", where)
    status_line = need(httptools_impl, "STATUS_LINE", where)
    for status in (408, 431):
        assert status_line[status].startswith(b"HTTP/1.1 %d " % status), status_line[status]
        assert status_line[status].endswith(b"\r\n")
    for name, value in vars(LimitedProtocol).items():
        if not callable(value):
            continue
        theirs = getattr(base, name, None)
        if name in OVERRIDDEN:
            assert theirs is not None and theirs.__qualname__.startswith("HttpToolsProtocol."), \
                f"{UVICORN}: HttpToolsProtocol.{name} is gone, LimitedProtocol overrides it"
        else:
            assert theirs is None, \
                f"{UVICORN}: HttpToolsProtocol now has {name!r}, which LimitedProtocol " \
                "defines for itself and would silently replace"
    assert OVERRIDDEN <= set(vars(LimitedProtocol)), "OVERRIDDEN lists a method no longer overridden"


def test_limited_protocol_sees_uvicorns_state_on_a_real_connection() -> None:
    """A request through a real uvicorn server with the protocol routegate installs."""
    import uvicorn

    from gateway.server import KEEP_ALIVE_S, LimitedProtocol, RequestLimits

    seen: dict[str, Any] = {}

    class Probe(LimitedProtocol):
        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            seen["protocol"] = [a for a in PROTOCOL_STATE if not hasattr(self, a)]
            seen["cycle"] = [a for a in CYCLE_STATE if not hasattr(self.cycle, a)]
            seen["cycle_scope"] = id(self.cycle.scope)
            seen["pipeline"] = len(self.pipeline)
            seen["path_timeout"] = self.body_timeout_s

    async def app(scope: dict, receive: Any, send: Any) -> None:
        seen["app_scope"] = id(scope)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def one_request() -> bytes:
        limits = RequestLimits.for_routes()
        server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=free_port(), lifespan="off", log_level="warning",
            http=functools.partial(Probe, limits=limits),  # type: ignore[arg-type]
            timeout_keep_alive=KEEP_ALIVE_S))
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.config.port)
        writer.write(b"GET /ui/login HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        server.should_exit = True
        await task
        return answer

    answer = asyncio.run(one_request())
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok"), answer
    assert seen["protocol"] == [], f"{UVICORN}: HttpToolsProtocol lost {seen['protocol']}"
    assert seen["cycle"] == [], f"{UVICORN}: RequestResponseCycle lost {seen['cycle']}"
    assert seen["cycle_scope"] == seen["app_scope"], \
        f"{UVICORN}: cycle.scope is not the scope the app gets (BODY_TIMED_OUT goes there)"
    assert seen["pipeline"] == 0 and seen["path_timeout"] == RequestLimits.for_routes(
    ).body_timeouts["/ui/login"], f"{UVICORN}: scope['path'] not set by on_headers_complete"
