"""The start-up block: where the gateway listens, what it runs on, and what is unsafe.

    log_startup(gw, listen="http://127.0.0.1:8080")

One block at info when the gateway is ready, then one warning per unsafe or
missing setting, so an operator reading only the first lines of the log
knows where it listens and what to fix. ``startup_block`` returns the lines
(tested without a server).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from gateway.auth import ADMIN_KEY_MIN_CHARS, admin_key

if TYPE_CHECKING:
    from core.config import GatewayConfig, ModelConfig
    from gateway.state import AppState

log = logging.getLogger("routegate.startup")
LISTEN_ENV = "ROUTEGATE_LISTEN"     # set by ``routegate serve`` for its workers


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _model(m: ModelConfig) -> str:
    where = m.backend if m.backend == "simulated" else f"{m.backend} x{len(m.base_urls)}"
    return (f"{m.name} ({m.kind}, {where}, {'+'.join(m.pools)}, "
            f"${m.price.input_per_mtok:g}/${m.price.output_per_mtok:g} per Mtok)")


def _redis(gw: AppState) -> str:
    if gw.redis is None:
        return "none"
    if gw.redis.embedded is not None:
        return f"embedded ({gw.redis.embedded.socket}; single host only)"
    return _redacted(gw.config.effective_redis_url or "") + (" (cluster)" if gw.redis.cluster
                                                             else "")


def startup_block(gw: AppState, listen: str | None) -> tuple[list[str], list[str]]:
    """(info lines, warnings)."""
    config = gw.config
    teams = config.teams
    blobs = gw.batch.files.blobs.describe() if gw.batch is not None else "off"
    info = [
        f"routegate ready on {listen or 'its ASGI server'} (replica {gw.replica_id})",
        "models: " + "; ".join(_model(m) for m in config.models),
        f"routing: auto -> {config.routing.auto_policy}; classifier "
        f"{config.routing.classifier or 'shipped'}; interactive SLO TTFT "
        f"{config.pools.interactive.ttft_ms:g} ms, TPOT {config.pools.interactive.tpot_ms:g} ms",
        f"teams: {len(teams)} ({', '.join(t.name for t in teams[:8])}"
        f"{', ...' if len(teams) > 8 else ''})",
        f"redis: {_redis(gw)}; key prefixes {config.budget.key_prefix} (budgets), "
        f"{config.batch.key_prefix} (batch)",
        f"batch: file bytes in {blobs}",
        "bulk data (stored responses, batch file bytes in Redis): " + (
            _redacted(config.storage.effective_redis_url or "") if gw.storage is not None
            else "the budget's Redis, within per-team quotas (storage.redis_url keeps them "
                 "apart)"),
        f"labels: {'on' if gw.labels is not None else 'off'}; feedback for "
        f"{[t.name for t in teams if t.feedback] or 'no team'}; shadows for "
        f"{[t.name for t in teams if t.shadow] or 'no team'}",
        "/ui history: " + (f"the last {config.metrics.history_minutes} minutes per minute in "
                           "Redis" if gw.history is not None else "off"),
    ]
    warned = warnings(gw.config, shared_redis=gw.redis is not None and gw.redis.embedded is None,
                      local_blobs=gw.batch is not None and gw.batch.probe is not None)
    if gw.eviction_risk is not None:
        warned.insert(0, gw.eviction_risk)
    return info, warned


def warnings(config: GatewayConfig, *, shared_redis: bool, local_blobs: bool) -> list[str]:
    out = []
    key = admin_key(config)
    if key is None:
        out.append(f"{config.admin_key_env} is not set: the admin API, /ui and a protected "
                   "/metrics refuse every key")
    elif len(key) < ADMIN_KEY_MIN_CHARS:
        out.append(f"{config.admin_key_env} is only {len(key)} characters long: use at least "
                   f"{ADMIN_KEY_MIN_CHARS} random characters")
    if config.metrics.enabled and not config.metrics.require_admin_key:
        out.append("/metrics is open to anyone who reaches this port and shows team names "
                   "and spend: set metrics.require_admin_key: true unless only a scraper "
                   "on a private network can reach it")
    if shared_redis and local_blobs:
        out.append("batch files are in a local directory while Redis is shared: replicas on "
                   "other hosts cannot read them (batch.blob_store: redis or s3)")
    if config.routing.auto_policy in ("cheapest", "fixed"):
        out.append(f"routing.auto_policy is {config.routing.auto_policy}: `auto` ignores the "
                   "teams' quality targets (slo_aware is the default)")
    if not config.teams:
        out.append("no teams: every request is refused (401)")
    return out + key_notes(config) + ability_notes(config)


# A target only a model this many times the cheapest's price reaches sends it most requests.
DEAR_FACTOR = 5.0
NEEDS_KEY = ("anthropic", "azure_openai")


def _unit_price(m: ModelConfig) -> float:
    return m.price.input_per_mtok + m.price.output_per_mtok


def key_notes(config: GatewayConfig) -> list[str]:
    """Models whose upstream key is missing: their first request would be a 502 upstream_auth."""
    out = []
    for m in config.models:
        if m.api_key_env and not os.environ.get(m.api_key_env):
            out.append(f"model {m.name}: {m.api_key_env} (its api_key_env) is not set: its "
                       "upstream will refuse every request (502 upstream_auth)")
        elif not m.api_key_env and m.backend in NEEDS_KEY:
            out.append(f"model {m.name}: backend {m.backend} needs a key: set api_key_env")
    return out


def ability_notes(config: GatewayConfig) -> list[str]:
    """Teams whose quality target only a dear model reaches by its ``ability``: `auto`
    sends them most requests there (docs/configuration.md, "ability")."""
    out = []
    chat = [m for m in config.models if m.kind == "chat"]
    for team in config.teams:
        allowed = [m for m in chat if team.allowed_models is None or m.name in team.allowed_models]
        if len(allowed) < 2:
            continue      # nothing to route between
        cheapest = min(allowed, key=_unit_price)
        meets = [m for m in allowed if m.ability >= team.quality]
        if not meets:
            out.append(f"team {team.name}: no model's ability reaches its quality {team.quality:g} "
                       f"(best {max(m.ability for m in allowed):g}): auto picks the best value "
                       "and marks it at risk; lower teams[].quality or check the abilities")
            continue
        best = min(meets, key=_unit_price)
        factor = _unit_price(best) / max(_unit_price(cheapest), 1e-12)
        if factor >= DEAR_FACTOR:
            out.append(f"team {team.name}: only {best.name} and dearer reach its quality "
                       f"{team.quality:g} by ability ({best.name} {best.ability:g}, {factor:.0f}x "
                       f"the price of {cheapest.name} at {cheapest.ability:g}): auto sends most "
                       "requests there; lower teams[].quality or check the abilities")
    return out


def log_startup(gw: AppState) -> None:
    info, warned = startup_block(gw, os.environ.get(LISTEN_ENV))
    log.info("\n  ".join(info))
    for line in warned:
        log.warning(line)
