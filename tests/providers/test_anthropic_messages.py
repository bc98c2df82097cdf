"""The anthropic SDK on ``/v1/messages``, through a real gateway, onto ``backend: anthropic``.

Same protocol, no translation: the body reaches the upstream as the client
wrote it (``cache_control``, ``thinking``, documents, its ``anthropic-beta``)
with only ``model`` rewritten, and Anthropic's answer and stream come back
as it wrote them, naming the configured model. A system prompt marked for
caching is written to the server's cache by the first call and read by the
second; both are billed at the cache prices, to the nano-dollar of the
server's own ledger, streams included.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import MessageParam, ToolParam

from tests.providers.anthropic_server import AnthropicServer
from tests.providers.conftest import Money
from tests.support import REPO, TEST_KEY, Gateway, child_env

RULES = "House rule: answer briefly, cite the rule, and never guess. " * 120   # > 1,024 tokens
HELLO: list[MessageParam] = [{"role": "user", "content": "Which rule applies here?"}]
WEATHER: ToolParam = {"name": "get_weather", "description": "The weather in a city now.",
                      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                       "required": ["city"]}}


@pytest.fixture
def sdk(anthropic_gateway: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=anthropic_gateway.url, api_key=TEST_KEY, max_retries=0,
                               timeout=30)


def system(name: str) -> Any:
    """A long system prompt no other test sent, marked for the cache."""
    return [{"type": "text", "text": f"You keep the house rules of {name}. " + RULES,
             "cache_control": {"type": "ephemeral"}}]


def without_model(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "model"}


@pytest.mark.parametrize("stream", [False, True])
def test_cache_control_reaches_the_upstream_and_both_calls_bill_at_cache_prices(
        sdk: anthropic.Anthropic, anthropic_gateway: Gateway, anthropic_server: AnthropicServer,
        stream: bool) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    kwargs: Any = {"model": "claude-a", "max_tokens": 32, "system": system(f"messages-{stream}"),
                   "messages": HELLO}
    shown = []
    for _ in range(2):
        if stream:
            with sdk.messages.stream(**kwargs) as events:
                shown.append(events.get_final_message())
        else:
            shown.append(sdk.messages.create(**kwargs))
    first, second = money.exchanges()
    for exchange in (first, second):         # as the client wrote it, but for the model
        sent = {**kwargs, **({"stream": True} if stream else {})}
        assert without_model(exchange.body) == without_model(sent)
        assert exchange.body["model"] == "claude-test"
    written = (first.usage or {})["cache_creation_input_tokens"]
    assert written > 1024 and (first.usage or {})["cache_read_input_tokens"] == 0
    assert (second.usage or {})["cache_read_input_tokens"] == written
    for message, exchange in zip(shown, (first, second), strict=True):
        assert message.model == "claude-a"
        usage = exchange.usage or {}
        assert message.usage.cache_read_input_tokens == usage["cache_read_input_tokens"]
        assert message.usage.cache_creation_input_tokens == usage["cache_creation_input_tokens"]
        assert message.usage.input_tokens == usage["input_tokens"]
        assert message.usage.output_tokens == usage["output_tokens"]
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0


def test_the_answer_is_anthropics_own(sdk: anthropic.Anthropic, anthropic_gateway: Gateway,
                                      anthropic_server: AnthropicServer) -> None:
    """Thinking, a text document with citations and a beta header: all kept both ways."""
    money = Money(anthropic_gateway, anthropic_server)
    message = sdk.messages.create(
        model="claude-a", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
        extra_headers={"anthropic-beta": "files-api-2025-04-14"},
        messages=[{"role": "user", "content": [
            {"type": "document", "title": "Memo", "citations": {"enabled": True},
             "source": {"type": "text", "media_type": "text/plain", "data": "Ship on Friday."}},
            {"type": "text", "text": "When do we ship?"}]}])
    exchange = money.exchanges()[-1]
    assert exchange.headers["anthropic-beta"] == "files-api-2025-04-14"
    assert exchange.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert exchange.body["messages"][0]["content"][0]["citations"] == {"enabled": True}
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.signature
    assert text.type == "text" and text.citations and text.citations[0].cited_text == "Ship on Friday."
    assert message.id.startswith("msg_") and message.model == "claude-a"
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0


def test_tools_round_trip_natively(sdk: anthropic.Anthropic, anthropic_gateway: Gateway,
                                   anthropic_server: AnthropicServer) -> None:
    money = Money(anthropic_gateway, anthropic_server)
    asked: list[MessageParam] = [{"role": "user", "content": "Weather in Paris?"}]
    with sdk.messages.stream(model="claude-a", max_tokens=256, messages=asked, tools=[WEATHER],
                             tool_choice={"type": "any"}) as events:
        called = events.get_final_message()
    use = called.content[-1]
    assert called.stop_reason == "tool_use" and use.type == "tool_use"
    assert use.input == {"city": "Paris"}
    history: list[MessageParam] = [*asked, {"role": "assistant", "content": called.content},
                                   {"role": "user", "content": [{"type": "tool_result",
                                                                 "tool_use_id": use.id,
                                                                 "content": "18C"}]}]
    answer = sdk.messages.create(model="claude-a", max_tokens=256, messages=history,
                                 tools=[WEATHER])
    assert answer.stop_reason == "end_turn"
    assert answer.content[0].type == "text" and answer.content[0].text.startswith("Thanks")
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0


def test_a_routed_request_served_elsewhere_is_translated(sdk: anthropic.Anthropic,
                                                         anthropic_gateway: Gateway,
                                                         anthropic_server: AnthropicServer) -> None:
    """The native body only goes to a model that speaks it: here the same door, with
    ``auto``, routes among anthropic models and still gets Anthropic's own answer."""
    money = Money(anthropic_gateway, anthropic_server)
    message = sdk.messages.create(model="claude-b", max_tokens=32, messages=HELLO,
                                  system=system("routed"))
    assert message.model == "claude-b"
    assert money.exchanges()[-1].body["system"] == system("routed")
    assert money.breaches() == []
    spent, expected = money.settled({"claude-other": 2.0})
    assert spent == expected > 0


def cache_counts(gw: Gateway) -> dict[str, int]:
    """claude-a's cache figures today: the ledger's (/v1/usage), /metrics' and the
    request log's (routegate report --json)."""
    usage = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"},
                      params={"days": 1}).json()
    rows = [r for r in usage["ledger"] if r["model"] == "claude-a"]
    metrics = dict(re.findall(r'^routegate_tokens_total\{kind="(cached|cache_write)",'
                              r'model="claude-a",team="t"\} (\S+)$',
                              httpx.get(gw.url + "/metrics").text, re.M))
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "gateway.cli", "report", "--config", str(gw.config_path),
         "--since", "1h", "--json"], capture_output=True, text=True, env=child_env(), cwd=REPO,
        timeout=60, check=True).stdout)
    logged = [r for r in report["rows"] if (r["team"], r["model"]) == ("t", "claude-a")]
    return {"ledger_read": sum(r["cached_tokens"] for r in rows),
            "ledger_written": sum(r["cache_write_tokens"] for r in rows),
            "metrics_read": int(float(metrics.get("cached", 0))),
            "metrics_written": int(float(metrics.get("cache_write", 0))),
            "log_read": sum(r["cached_tokens"] for r in logged),
            "log_written": sum(r["cache_write_tokens"] for r in logged)}


def test_cache_writes_and_reads_are_kept_in_the_ledger_metrics_and_log(
        sdk: anthropic.Anthropic, anthropic_gateway: Gateway,
        anthropic_server: AnthropicServer) -> None:
    """What the server counted as written to its cache and read from it, in the
    ledger, /metrics and the request log alike (the ledger kept no writes)."""
    money = Money(anthropic_gateway, anthropic_server)
    before = cache_counts(anthropic_gateway)
    for _ in range(2):
        sdk.messages.create(model="claude-a", max_tokens=16, system=system("ledger"),
                            messages=HELLO)
    assert money.settled()[0] > 0
    served = [x.usage or {} for x in money.exchanges()]
    written = sum(u["cache_creation_input_tokens"] for u in served)
    read = sum(u["cache_read_input_tokens"] for u in served)
    assert written > 1024 and read == written
    want = {f"{where}_{kind}": n for where in ("ledger", "metrics", "log")
            for kind, n in (("read", read), ("written", written))}
    deadline = time.monotonic() + 10
    while True:            # the metrics' and the log's batched flushes
        now = cache_counts(anthropic_gateway)
        got = {k: now[k] - before[k] for k in now}
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert got == want


@pytest.mark.parametrize("door", ["messages", "chat"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_cache_write_kept_an_hour_bills_at_the_hours_price(
        sdk: anthropic.Anthropic, anthropic_gateway: Gateway, anthropic_server: AnthropicServer,
        door: str, stream: bool) -> None:
    """A breakpoint with ``ttl: "1h"``: Anthropic bills its write at twice the input
    (the 5-minute write's 1.25x was billed), and the reservation holds that much.
    Through the Messages door and the chat door (which passes the ttl on), streamed
    or not, the bill is the server's usage with its 5m/1h split, to the nano-dollar."""
    money = Money(anthropic_gateway, anthropic_server)
    mark = {"type": "ephemeral", "ttl": "1h"}
    rules = f"You keep the house rules of the hour, {door} {stream}. " + RULES
    if door == "messages":
        kwargs: Any = {"model": "claude-a", "max_tokens": 16, "messages": HELLO,
                       "system": [{"type": "text", "text": rules, "cache_control": mark}]}
        if stream:
            with sdk.messages.stream(**kwargs) as events:
                events.get_final_message()
        else:
            sdk.messages.create(**kwargs)
    else:
        body = {"model": "claude-a", "max_tokens": 16, "stream": stream, "messages": [
            {"role": "system", "content": [{"type": "text", "text": rules,
                                            "cache_control": mark}]},
            {"role": "user", "content": "Which rule applies here?"}]}
        r = httpx.post(anthropic_gateway.base_url + "/chat/completions", json=body, timeout=30,
                       headers={"authorization": f"Bearer {TEST_KEY}"})
        assert r.status_code == 200, r.text
    [sent] = money.exchanges()
    usage = sent.usage or {}
    hour = usage["cache_creation"]["ephemeral_1h_input_tokens"]
    assert hour == usage["cache_creation_input_tokens"] > 1024
    assert money.breaches() == []
    spent, expected = money.settled()
    assert spent == expected > 0
