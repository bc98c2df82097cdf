"""Reloading teams, keys, budgets and limits without a restart.

The config file is watched (its modification time, every two seconds, in
every worker) and re-read on SIGHUP or ``POST /admin/reload``. Only the
``teams`` section is applied live; a changed model list, routing or budget
settings section is reported as needing a restart. A file that does not
validate is logged and ignored, so a typo never takes the gateway down.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from core.config import ConfigError, load_config
from gateway.auth import KeyRing
from gateway.state import AppState

logger = logging.getLogger("routegate.reload")
WATCH_INTERVAL_S = 2.0


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
    restart = [section for section in ("models", "routing", "budget", "pools", "redis_url")
               if getattr(new, section) != getattr(gw.config, section)]
    gw.config = gw.config.model_copy(update={"teams": new.teams})
    gw.keyring = KeyRing.from_config(gw.config)
    logger.info("reloaded %d teams from %s%s", len(new.teams), gw.config_path,
                f"; restart to apply {restart}" if restart else "")
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
