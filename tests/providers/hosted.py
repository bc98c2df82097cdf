"""A gateway in front of the Azure or the Bedrock test server, and what each server says
a team owes.

    with hosted("bedrock") as h:            # the server in this process, the gateway a child
        h.gw, h.main, h.backup, h.limited   # the gateway; its configured model names
        h.owed(since)                       # nano-USD of the server's ledger rows since
        h.rows(), h.refused()               # the ledger; requests it turned away as off-spec

Each has three models: ``main`` and a dearer ``backup`` that answer, and a
cheaper ``limited`` one its server always throttles (a second team may use
only ``limited`` and ``backup``, under the ``cheapest`` policy). Prices include
the cache prices, so that cached and written tokens bill apart.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from budget.nanousd import cost_nanousd
from tests.providers.azure_server import AzureServer
from tests.providers.bedrock_server import ACCESS_KEY, REGION, SECRET_KEY, BedrockServer
from tests.providers.loopback import serve
from tests.support import Gateway, hashed, run_gateway

KEY, LADDER_KEY = "sk-hosted-team", "sk-hosted-ladder"
PRICES = {"main": (3.0, 15.0, 0.3, 3.75), "backup": (6.0, 30.0, 0.6, 7.5),
          "limited": (0.5, 1.0, 0.05, 0.6)}      # input, output, cached read, cache write
AZURE_IDS = {"main": "gpt4o", "backup": "gpt4o-backup", "limited": "gpt4o-throttled"}
BEDROCK_IDS = {"main": "anthropic.claude-3-haiku-20240307-v1:0",
               "backup": ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
                          "us.anthropic.claude-3-5-sonnet-20241022-v2:0"),
               "limited": "meta.llama3-8b-instruct-v1:0"}


def price(role: str) -> dict[str, float]:
    i, o, c, w = PRICES[role]
    return {"input_per_mtok": i, "output_per_mtok": o, "cached_input_per_mtok": c,
            "cache_write_per_mtok": w}


@dataclass
class Hosted:
    provider: str
    gw: Gateway
    server: Any                   # AzureServer | BedrockServer
    roles: dict[str, str]         # upstream id -> role

    main = property(lambda self: f"{self.provider}-main")
    backup = property(lambda self: f"{self.provider}-backup")
    limited = property(lambda self: f"{self.provider}-limited")

    def rows(self) -> list[Any]:
        return list(self.server.ledger.rows)

    def refused(self) -> list[tuple[int, str]]:
        return list(self.server.ledger.refused)

    def owed(self, since: int) -> int:
        """What the server's own count of each answer since ``since`` costs, at the prices."""
        total = 0
        for row in self.rows()[since:]:
            if self.provider == "azure":
                i, o, c, _ = PRICES[self.roles[row.deployment]]
                total += cost_nanousd(row.prompt_tokens - row.cached_tokens,
                                      row.completion_tokens, i, o, row.cached_tokens, c)
            else:
                i, o, c, w = PRICES[self.roles[row.model_id]]
                total += cost_nanousd(row.input_tokens, row.output_tokens, i, o,
                                      row.cache_read, c, row.cache_write, w)
        return total


def _models(provider: str) -> list[dict[str, Any]]:
    ids = AZURE_IDS if provider == "azure" else BEDROCK_IDS
    out = []
    for role, upstream in ids.items():
        model: dict[str, Any] = {"name": f"{provider}-{role}", "upstream_model": upstream,
                                 "price": price(role), "context_window": 32000,
                                 "max_output_tokens": 1024, "ability": 0.5}
        if provider == "azure":
            model.update(backend="azure_openai", api_key_env="RG_TEST_AZURE_KEY")
        else:
            model.update(backend="bedrock", region=REGION, tokenizer="cl100k_base")
        out.append(model)
    return out


def config(provider: str, models: list[dict[str, Any]]) -> dict[str, Any]:
    names = [m["name"] for m in models]
    return {"models": models,
            "teams": [{"name": "hosted", "keys": [hashed(KEY)]},
                      {"name": "ladder", "keys": [hashed(LADDER_KEY)],
                       "allowed_models": [names[2], names[1]]}],
            "redis_url": "redis://127.0.0.1:6379/0", "routing": {"auto_policy": "cheapest"},
            "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
            # Batch lines bill at the list price here, so the server's ledger is what is owed.
            "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}", "poll_interval_s": 0.05,
                      "claim_interval_s": 0.5},
            "pools": {"batch": {"price_multiplier": 1.0}}}


@contextlib.contextmanager
def hosted(provider: str) -> Iterator[Hosted]:
    ids = AZURE_IDS if provider == "azure" else BEDROCK_IDS
    server: Any
    if provider == "azure":
        server = AzureServer({upstream: "chat" for upstream in ids.values()})
        server.throttle(ids["limited"], times=-1, retry_after_s=7)
        env = {"RG_TEST_AZURE_KEY": server.key}
    else:
        server = BedrockServer(set(ids.values()))
        server.throttle(ids["limited"], times=-1)
        # botocore's standard chain, from the environment; no instance metadata lookups
        env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
               "AWS_EC2_METADATA_DISABLED": "true"}
    with serve(server.app) as url:
        models = _models(provider)
        for model in models:
            model["base_url"] = url
        with run_gateway(config(provider, models), env=env) as gw:
            yield Hosted(provider, gw, server, {v: k for k, v in ids.items()})
