"""A real gateway in front of the Anthropic test server, shared by the provider tests.

    anthropic_server          the protocol-faithful Messages API (anthropic_server.py)
    anthropic_gateway         ``routegate serve`` on loopback (real Redis), its models
                              ``backend: anthropic`` onto that server
    Money(gw, server)         the team's spend against the server's own ledger

Prices are Anthropic's shape: cache reads at a tenth of the input price, 5-minute
cache writes at 1.25 times it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from budget.nanousd import cost_nanousd
from tests.providers.anthropic_server import ANTHROPIC_KEY, AnthropicServer, Exchange, run_anthropic_server
from tests.support import SHARED, TEST_KEY, Gateway, hashed, run_gateway

os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))

KEY_ENV = "ROUTEGATE_TEST_ANTHROPIC_KEY"
PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cached_input_per_mtok": 0.3,
         "cache_write_per_mtok": 3.75}
HOUR_WRITE_PER_MTOK = 6.0       # Anthropic's 1-hour writes: twice the input (the default)
# Teams routed (auto, cheapest first) from a faulty model to a good one: key -> models.
FALLBACK_TEAMS = {"sk-anthropic-429": ["throttled", "claude-b"],
                  "sk-anthropic-529": ["overloaded", "claude-b"],
                  "sk-anthropic-early": ["early-error", "claude-b"],
                  "sk-anthropic-mixed": ["throttled-too", "sim"]}
AUTO_A_KEY = "sk-anthropic-auto-a"      # a team whose `auto` routes to claude-a alone


def claude(name: str, upstream: str, server: AnthropicServer, price: float = 1.0,
           **extra: Any) -> dict[str, Any]:
    return {"name": name, "backend": "anthropic", "base_url": server.url,
            "upstream_model": upstream, "api_key_env": KEY_ENV, "context_window": 200_000,
            "max_output_tokens": 4096, "ability": 0.7,
            "price": {k: v * price for k, v in PRICE.items()}, **extra}


def gateway_config(server: AnthropicServer, sim_url: str) -> dict[str, Any]:
    """Anthropic models onto the test server, and one OpenAI-compatible model (the
    simulator), which a Messages request falls back to in its chat form."""
    fallbacks = [{"name": key.removeprefix("sk-"), "keys": [hashed(key)], "allowed_models": models}
                 for key, models in FALLBACK_TEAMS.items()]
    return {
        "models": [
            claude("claude-a", "claude-test", server),
            claude("claude-b", "claude-other", server, price=2.0),
            claude("throttled", "claude-throttled", server, price=0.1),
            claude("throttled-too", "claude-throttled", server, price=0.1),
            claude("overloaded", "claude-overloaded", server, price=0.1),
            claude("early-error", "claude-stream-overloaded", server, price=0.1),
            claude("breaks", "claude-midstream-error", server, tokenizer="cl100k_base"),
            {**claude("no-key", "claude-test", server), "api_key_env": KEY_ENV + "_UNSET"},
            {"name": "sim", "backend": "openai_compat", "base_url": sim_url,
             "upstream_model": "default", "ability": 0.7, "context_window": 200_000,
             "price": {"input_per_mtok": 5.0, "output_per_mtok": 5.0}},
        ],
        "teams": [{"name": "t", "keys": [hashed(TEST_KEY)]}, *fallbacks,
                  {"name": "auto-a", "keys": [hashed(AUTO_A_KEY)], "allowed_models": ["claude-a"]}],
        "routing": {"auto_policy": "cheapest"},
        "redis_url": "redis://127.0.0.1:6379/0",
        "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
        "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}", "poll_interval_s": 0.05,
                  "claim_interval_s": 0.5},
    }


@pytest.fixture(scope="session")
def anthropic_server() -> Iterator[AnthropicServer]:
    with run_anthropic_server() as server:
        yield server


@pytest.fixture(scope="session")
def anthropic_gateway(anthropic_server: AnthropicServer, sim_url: str) -> Iterator[Gateway]:
    with run_gateway(gateway_config(anthropic_server, sim_url),
                     env={KEY_ENV: ANTHROPIC_KEY}) as gw:
        yield gw


def honest(x: Exchange, rate: float = 1.0) -> int:
    """What the server's own usage costs at the configured prices."""
    u = x.usage or {}
    p = {k: v * rate for k, v in PRICE.items()}
    hour = (u.get("cache_creation") or {}).get("ephemeral_1h_input_tokens", 0)
    return cost_nanousd(u["input_tokens"], u["output_tokens"], p["input_per_mtok"],
                        p["output_per_mtok"], u["cache_read_input_tokens"],
                        p["cached_input_per_mtok"], u["cache_creation_input_tokens"] - hour,
                        p["cache_write_per_mtok"], hour, HOUR_WRITE_PER_MTOK * rate)


class Money:
    """A window on a team's spend and on the server's ledger, from now on."""

    def __init__(self, gw: Gateway, server: AnthropicServer, key: str = TEST_KEY) -> None:
        self.gw, self.server, self.key = gw, server, key
        self.spent0, self.seen0 = self.spent(), len(server.ledger)

    def spent(self) -> int:
        r = httpx.get(self.gw.base_url + "/usage", headers={"authorization": f"Bearer {self.key}"})
        return int(r.json()["spent_today_nanousd"])

    def exchanges(self) -> list[Exchange]:
        return self.server.ledger[self.seen0:]

    def settled(self, rates: dict[str, float] | None = None) -> tuple[int, int]:
        """(the team's spend since, the server's usage at the prices), once they agree or
        5 s have passed (settles are queued after the answer is sent)."""
        rates = rates or {}
        deadline = time.monotonic() + 5
        while True:
            answered = [x for x in self.exchanges() if x.usage is not None]
            expected = sum(honest(x, rates.get(x.body["model"], 1.0)) for x in answered)
            now = self.spent() - self.spent0
            if now == expected or time.monotonic() > deadline:
                return now, expected
            time.sleep(0.05)

    def breaches(self) -> list[Exchange]:
        """Requests since that the server refused as off-spec, or had to combine."""
        return [x for x in self.exchanges() if x.off_spec or x.lints]
