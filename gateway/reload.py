"""Reloading teams, keys, budgets and limits without a restart.

The config file is watched (its modification time, every two seconds, in
every worker) and re-read on SIGHUP or ``POST /admin/reload``. Only the
``teams`` section is applied live. Every other top-level key that differs
(models, routing, escalation, breaker, budget, batch, logging, otel,
``max_body_bytes``, ...) is logged at warning and returned as
``needs_restart``; the list comes from ``GatewayConfig``'s fields, so a new
section can never be skipped silently. A file that does not validate is
logged and ignored, so a typo never takes the gateway down.

    reload_teams(gw)   # {"reloaded": True, "teams": ["search"], "needs_restart": ["breaker"]}
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from core.config import ConfigError, GatewayConfig, load_config
from gateway.auth import KeyRing
from gateway.state import AppState

logger = logging.getLogger("routegate.reload")
WATCH_INTERVAL_S = 2.0
APPLIED_LIVE = frozenset({"teams"})


def needs_restart(running: GatewayConfig, new: GatewayConfig) -> list[str]:
    """The top-level keys of ``new`` that differ from the running config but
    cannot be applied without a restart, in the model's field order."""
    return [name for name in GatewayConfig.model_fields
            if name not in APPLIED_LIVE and getattr(new, name) != getattr(running, name)]


def reload_teams(gw: AppState) -> dict[str, Any]:
    if gw.config_path is None:
        return {"reloaded": False, "reason": "the gateway was not started from a file"}
    try:
        new = load_config(gw.config_path)
    except ConfigError as exc:
        logger.error("config reload refused: %s", exc)
        return {"reloaded": False, "errors": [f"{loc}: {msg}" for loc, msg in exc.errors]}
    known = set(gw.models)
    unknown = {m for t in new.teams for m in (t.allowed_models or []) if m not in known}
    if unknown:
        logger.error("config reload refused: teams allow models not running: %s", unknown)
        return {"reloaded": False, "errors": [f"unknown models {sorted(unknown)}"]}
    restart = needs_restart(gw.config, new)
    if any(not gw.router.has_classifier(t.classifier) for t in new.teams if t.classifier):
        restart.append("teams[].classifier")    # loaded at start: routing.classifier till then
    gw.config = gw.config.model_copy(update={"teams": new.teams})
    gw.keyring = KeyRing.from_config(gw.config)
    logger.info("reloaded %d teams from %s", len(new.teams), gw.config_path)
    if restart:
        logger.warning("config reload applied teams only: restart to apply %s (changed in %s; "
                       "the old values stay in force until then)", ", ".join(restart), gw.config_path)
    return {"reloaded": True, "teams": [t.name for t in new.teams], "needs_restart": restart}


async def watch_config(gw: AppState) -> None:
    """Poll the file's mtime; reload when it changes."""
    assert gw.config_path is not None
    path = gw.config_path
    last = os.stat(path).st_mtime_ns
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            continue
        if mtime != last:
            last = mtime
            reload_teams(gw)
