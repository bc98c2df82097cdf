"""docs/grafana/routegate.json against a real gateway's /metrics: every metric a
panel or a template variable queries is one the gateway exposes, spelt exactly
(``routegate_ttft_seconds_bucket``, not the histogram's family name)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from loadtest import servers
from tests.support import REPO, TEST_KEY, base_config, run_gateway, run_simulator

DASHBOARD = REPO / "docs" / "grafana" / "routegate.json"
NAME = re.compile(r"(?<![\w:])routegate_[\w:]*")
SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)[{ ]", re.MULTILINE)
FAMILY = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
# Referenced, but this test's traffic makes no series of it (an upstream's usage
# corrected before billing); its family is still declared on every scrape.
# Nor cached prompt tokens at a discount, or a team's response cache: not configured here.
NO_SERIES_HERE = {"routegate_usage_anomalies_total", "routegate_cache_saved_usd_total",
                  "routegate_cache_write_premium_usd_total",
                  "routegate_response_cache_total"}
ASK = [{"role": "user", "content": "Give me the weather in Oslo as JSON."}]


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row, including those inside collapsed rows."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for each panel target and each query template variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            yield f"variable {var['name']}", query if isinstance(query, str) else query["query"]


def referenced(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """Metric name -> the panels and variables whose queries name it."""
    names: dict[str, set[str]] = {}
    for where, expr in queries(dashboard):
        for name in NAME.findall(expr):
            names.setdefault(name, set()).add(where)
    return names


def sampled(text: str) -> set[str]:
    """The names of the sample lines of a scrape."""
    return set(SAMPLE.findall(text))


def exposed(text: str) -> set[str]:
    """What a query may name: a sample's name, or a declared family that is not a
    histogram (a counter or gauge with no series yet). A histogram is queried
    through its ``_bucket``/``_sum``/``_count`` samples, never its family name."""
    families = {name for name, kind in FAMILY.findall(text) if kind != "histogram"}
    return sampled(text) | families


def sim_model(name: str, ability: float, price: float, **simulate: object) -> dict:
    return servers.sim_model(name, ability, price, tpot_ms=1, prefill_tokens_per_s=1_000_000,
                             **simulate)


def traffic_config(sim: str) -> dict:
    """auto: ``broken`` (cheapest) fails and falls back to ``small``, whose invalid
    JSON escalates to ``medium``; ``fast`` publishes its upstream's load; the
    team has a hard budget."""
    config = base_config(sim, routing={"auto_policy": "cheapest", "fallback": True})
    config["models"][0]["load_metrics"] = {"format": "vllm", "interval_s": 0.2}   # fast
    config["models"][2]["price"] = {"input_per_mtok": 0.01, "output_per_mtok": 0.01}  # broken
    config["models"] += [sim_model("small", 0.5, 0.1, invalid_json_rate=1.0),
                         sim_model("medium", 0.7, 1.0)]
    config["teams"][0]["allowed_models"] = ["broken", "small", "medium", "fast"]
    config["teams"][0]["budget"] = {"daily_hard_usd": 5}
    config["teams"][0]["feedback"] = True
    return config


@pytest.fixture(scope="module")
def scrape() -> str:
    """/metrics after a chat, a stream, one that falls back and escalates, a 404, and
    feedback on an unknown answer."""
    with run_simulator() as sim, run_gateway(traffic_config(sim)) as gw:
        with httpx.Client(base_url=gw.url, timeout=30,
                          headers={"authorization": f"Bearer {TEST_KEY}"}) as http:
            def chat(**body: object) -> httpx.Response:
                return http.post("/v1/chat/completions",
                                 json={"max_tokens": 8, "messages": ASK, **body})

            assert chat(model="fast").status_code == 200
            with http.stream("POST", "/v1/chat/completions", json={
                    "model": "fast", "stream": True, "max_tokens": 8, "messages": ASK}) as r:
                assert r.status_code == 200 and "[DONE]" in r.read().decode()
            r = chat(model="auto", response_format={"type": "json_object"})
            attempts = r.headers.get("x-routegate-attempts", "")
            assert r.status_code == 200 and attempts.startswith("broken:upstream_error,small:")
            assert len(attempts.split(",")) == 3, attempts    # fell back, then escalated
            assert chat(model="no-such-model").status_code >= 400
            assert http.post("/v1/feedback", json={"request_id": "req_" + "0" * 24,
                                                   "score": 1}).status_code == 404
            deadline = time.monotonic() + 10
            while True:   # the upstream's load comes with its first poll
                text = http.get("/metrics").text
                if "routegate_upstream_running{" in text or time.monotonic() > deadline:
                    return text
                time.sleep(0.2)


def test_the_dashboard_has_panels_each_with_a_query() -> None:
    dashboard = load()
    found = list(panels(dashboard))
    assert len(found) >= 20
    for panel in found:
        assert panel.get("targets"), f"panel {panel['title']!r} has no target"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"panel {panel['title']!r}: empty expr"
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    kinds = {v["type"]: v for v in dashboard["templating"]["list"]}
    assert kinds["datasource"]["query"] == "prometheus"
    assert dashboard["schemaVersion"] >= 38    # Grafana 10.0


def test_every_referenced_metric_is_exposed(scrape: str) -> None:
    names = referenced(load())
    assert "routegate_ttft_seconds_bucket" in names and "routegate_requests_total" in names
    missing = {name: sorted(where) for name, where in names.items()
               if name not in exposed(scrape)}
    assert not missing, f"named in the dashboard, not in /metrics: {missing}"
    without_series = set(names) - sampled(scrape) - NO_SERIES_HERE
    assert not without_series, f"no series after the traffic: {sorted(without_series)}"
    assert re.search(r'^routegate_ttft_seconds_bucket\{[^}]*model="fast"', scrape, re.MULTILINE)


def test_a_misspelt_name_is_not_exposed(scrape: str) -> None:
    """The check above can fail: near misses of real names are not exposed."""
    names = exposed(scrape)
    assert "routegate_ttft_seconds_bucket" in names and "routegate_in_flight" in names
    for wrong in ("routegate_ttft_second_bucket", "routegate_ttft_seconds",
                  "routegate_in_flight_bucket", "routegate_requests", "routegate_cost_usd"):
        assert wrong not in names, wrong
    assert NAME.findall('rate(routegate_ttft_seconds_bucket{model=~"$model"}[5m]) / '
                        "routegate_x:y") == ["routegate_ttft_seconds_bucket", "routegate_x:y"]
