"""An upstream that caches only at breakpoints (Anthropic) is warm for what was marked.

One Anthropic model onto the test server (input $0.80 per Mtok, cache reads $0.08,
writes $1.00) and a simulated one without a prefix cache ($0.90), both meeting the
team's target. A prompt the Anthropic model served is cheaper there on the next turn
only if its cache holds it: the test server bills what it really read and wrote, so a
turn sent there on a prefix it never cached pays the write instead of the read, and
would have been cheaper on the other model. A marked prompt is written at the write
price, which the choice counts too.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.providers.anthropic_server import ANTHROPIC_KEY, AnthropicServer
from tests.support import TEST_KEY, Gateway, hashed, run_gateway

KEY_ENV = "ROUTEGATE_TEST_ANTHROPIC_KEY"
MARK = {"cache_control": {"type": "ephemeral"}}
DEAR_KEY = "sk-breakpoint-dear"     # a team of claude-dear ($1.00, reads $0.10, writes $1.25)
HOUR_KEY = "sk-breakpoint-hour"     # a team of claude-hour ($0.50, writes $0.625, an hour's $1.00)


@pytest.fixture(scope="module")
def gateway(anthropic_server: AnthropicServer) -> Iterator[Gateway]:
    claude = {"name": "claude", "backend": "anthropic", "base_url": anthropic_server.url,
              "upstream_model": "claude-test", "api_key_env": KEY_ENV,
              "context_window": 200_000, "max_output_tokens": 512, "ability": 0.97,
              "price": {"input_per_mtok": 0.8, "output_per_mtok": 1.6,
                        "cached_input_per_mtok": 0.08, "cache_write_per_mtok": 1.0}}
    plain = {"name": "plain", "backend": "simulated", "ability": 0.75,
             "price": {"input_per_mtok": 0.9, "output_per_mtok": 1.8},
             "context_window": 200_000, "max_output_tokens": 512,
             "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000, "seed": 7,
                          "output_tokens_mean": 8, "prefix_cache": False}}
    dear = {**claude, "name": "claude-dear",
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0,
                      "cached_input_per_mtok": 0.1, "cache_write_per_mtok": 1.25}}
    hour = {**claude, "name": "claude-hour",
            "price": {"input_per_mtok": 0.5, "output_per_mtok": 1.6,
                      "cached_input_per_mtok": 0.05, "cache_write_per_mtok": 0.625}}
    config = {"models": [claude, plain, dear, hour],
              "teams": [{"name": "test", "keys": [hashed(TEST_KEY)], "quality": 0.1,
                         "allowed_models": ["claude", "plain"]},
                        {"name": "dear", "keys": [hashed(DEAR_KEY)], "quality": 0.1,
                         "allowed_models": ["claude-dear", "plain"]},
                        {"name": "hour", "keys": [hashed(HOUR_KEY)], "quality": 0.1,
                         "allowed_models": ["claude-hour", "plain"]}],
              "routing": {"auto_policy": "quality"},
              "redis_url": "redis://127.0.0.1:6379/0", "metrics": {"enabled": False},
              "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
              "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}",
                        "worker_in_serve": False}}
    with run_gateway(config, env={KEY_ENV: ANTHROPIC_KEY}) as gw:
        yield gw


def text(words: str, marked: bool) -> list[dict[str, Any]]:
    return [{"type": "text", "text": words, **(MARK if marked else {})}]


def ask(gw: Gateway, model: str, system: list[dict[str, Any]],
        messages: list[dict[str, Any]], key: str = TEST_KEY,
        **extra: Any) -> tuple[str, dict[str, Any]]:
    r = httpx.post(gw.url + "/v1/messages", timeout=60,
                   headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                   json={"model": model, "system": system, "messages": messages,
                         "max_tokens": 16, **extra})
    r.raise_for_status()
    return r.headers["x-routegate-model"], r.json()["usage"]


@pytest.mark.parametrize("first, then, served", [
    # The next turn of the same session, marked at its end:
    ("none", "next turn", "plain"),      # nothing was cached: claude would write it all
    ("end", "next turn", "claude"),      # the whole first prompt was cached: read it
    # A new session with the same system prompt, marked at its end:
    ("end", "new session", "plain"),     # only whole prompts were cached, not the system's
    ("system", "new session", "claude"),  # the system prompt was cached: read it
])
def test_a_breakpoint_upstream_is_warm_only_for_what_was_marked(
        gateway: Gateway, first: str, then: str, served: str) -> None:
    rng = random.Random(f"{first}-{then}")
    rules = "agent rules. " + " ".join(rng.choice(["cache", "prefix", "agent", "tool"])
                                       for _ in range(3000))
    model, _ = ask(gateway, "auto:0.9", text(rules, first == "system"),
                   [{"role": "user", "content": text("Summarise.", first == "end")}])
    assert model == "claude"
    messages: list[dict[str, Any]]
    if then == "next turn":
        messages = [{"role": "user", "content": text("Summarise.", False)},
                    {"role": "assistant", "content": "Done."},
                    {"role": "user", "content": text("Shorter.", True)}]
    else:
        messages = [{"role": "user", "content": text("Another task entirely.", True)}]
    model, usage = ask(gateway, "auto", text(rules, first == "system"), messages)
    assert model == served
    if served == "claude":                # and it read the prompt from its cache
        assert usage["cache_read_input_tokens"] > 2000


@pytest.mark.parametrize("marked, served", [(False, "claude"), (True, "plain")])
def test_a_marked_prompt_is_priced_at_the_write_it_costs(gateway: Gateway, marked: bool,
                                                         served: str) -> None:
    """Nothing warm: unmarked, the prompt costs claude's input price, the cheaper; marked,
    claude writes it at $1.00 per Mtok, dearer than the other model's $0.90."""
    rng = random.Random(f"fresh-{marked}")
    rules = "house rules. " + " ".join(rng.choice(["write", "read", "mark"]) for _ in range(3000))
    model, _ = ask(gateway, "auto", text(rules, False),
                       [{"role": "user", "content": text("First task.", marked)}])
    assert model == served


def test_a_marked_prompt_too_short_to_cache_costs_the_input_price(gateway: Gateway) -> None:
    """Under the breakpoint cache's minimum (1,024 tokens here, as the test server and
    Sonnet keep) a marked prompt is written to no cache: it costs claude's input price,
    the cheaper, and the server says it wrote nothing."""
    model, usage = ask(gateway, "auto", text("Be brief. " * 100, False),
                       [{"role": "user", "content": text("First task.", True)}])
    assert model == "claude"
    assert usage["cache_creation_input_tokens"] == 0


def test_a_breakpoint_on_the_tools_alone_keeps_no_head(gateway: Gateway) -> None:
    """A session marks only its tools: the cache keeps the tools, not the system prompt
    after them. Another session with that head is not priced as if the whole head were
    warm on claude-dear ($1.00 a Mtok against plain's $0.90)."""
    rng = random.Random("tools-only")
    words = ["tool", "schema", "field", "value"]
    tools = [{"name": f"tool_{n}", "description": " ".join(rng.choice(words) for _ in range(300)),
              "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}},
              **(MARK if n == 4 else {})} for n in range(5)]
    system = text("system rules. " + " ".join(rng.choice(words) for _ in range(4000)), False)
    first, _ = ask(gateway, "auto:0.9", system, [{"role": "user", "content": text("One.", False)}],
                   key=DEAR_KEY, tools=tools)
    assert first == "claude-dear"
    second, _ = ask(gateway, "auto", system, [{"role": "user", "content": text("Two.", False)}],
                    key=DEAR_KEY, tools=tools)
    assert second == "plain"


@pytest.mark.parametrize("door", ["messages", "chat"])
@pytest.mark.parametrize("ttl, served", [(None, "claude-hour"), ("1h", "plain")])
def test_a_prompt_marked_for_an_hour_is_priced_at_the_hours_write(
        gateway: Gateway, door: str, ttl: str | None, served: str) -> None:
    """claude-hour writes a marked prompt at $0.625 per Mtok, cheaper than plain's $0.90
    input; kept an hour (``ttl: "1h"``) it writes at twice its input price, $1.00, which
    Anthropic bills and the choice counted as $0.625 before."""
    rng = random.Random(f"hour-{door}-{ttl}")
    rules = "hour rules. " + " ".join(rng.choice(["keep", "hour", "write"]) for _ in range(3000))
    mark = {"cache_control": {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}}
    task = [{"type": "text", "text": "First task.", **mark}]
    if door == "messages":
        model, usage = ask(gateway, "auto", text(rules, False),
                           [{"role": "user", "content": task}], key=HOUR_KEY)
    else:
        r = httpx.post(gateway.url + "/v1/chat/completions", timeout=60,
                       headers={"authorization": f"Bearer {HOUR_KEY}"},
                       json={"model": "auto", "max_tokens": 16, "messages": [
                           {"role": "system", "content": rules},
                           {"role": "user", "content": task}]})
        r.raise_for_status()
        model = r.headers["x-routegate-model"]
    assert model == served
