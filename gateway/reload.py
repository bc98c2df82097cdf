"""Reloading teams, keys, budgets and limits without a restart.

The config file is watched (its modification time, every two seconds, in
every worker) and re-read on SIGHUP or ``POST /admin/reload``. Only the
``teams`` section is applied live, with the classifiers it names
(``teams[].classifier``): a newly named one is loaded, in a thread, and so is
one whose artifact changed (a ``routegate learn`` into the same directory is
watched like the file); one that cannot load leaves its teams on the last good
copy, else on ``routing.classifier``. Every other top-level key that differs
(models, routing, escalation, breaker, budget, batch, logging, otel,
``max_body_bytes``, ...) is logged at warning and returned as
``needs_restart``; the list comes from ``GatewayConfig``'s fields, so a new
section can never be skipped silently. A file that does not validate is
logged and ignored, so a typo never takes the gateway down.

    await reload_teams(gw)   # {"reloaded": True, "teams": ["search"], "needs_restart": ["breaker"]}
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from core.config import ConfigError, GatewayConfig, load_config
from gateway.auth import KeyRing
from gateway.state import AppState, Stamp, artifact_stamp, load_team_classifiers

logger = logging.getLogger("routegate.reload")
WATCH_INTERVAL_S = 2.0
APPLIED_LIVE = frozenset({"teams"})


def needs_restart(running: GatewayConfig, new: GatewayConfig) -> list[str]:
    """The top-level keys of ``new`` that differ from the running config but
    cannot be applied without a restart, in the model's field order."""
    return [name for name in GatewayConfig.model_fields
            if name not in APPLIED_LIVE and getattr(new, name) != getattr(running, name)]


async def reload_teams(gw: AppState) -> dict[str, Any]:
    """Re-read the config file and apply its teams (and the classifiers they
    name); one reload at a time, its file reads off the event loop."""
    async with gw.reload_lock:
        return await _reload(gw)


async def _reload(gw: AppState) -> dict[str, Any]:
    if gw.config_path is None:
        return {"reloaded": False, "reason": "the gateway was not started from a file"}
    try:
        new = await asyncio.to_thread(load_config, gw.config_path)
    except ConfigError as exc:
        logger.error("config reload refused: %s", exc)
        return {"reloaded": False, "errors": [f"{loc}: {msg}" for loc, msg in exc.errors]}
    known = set(gw.models)
    unknown = {m for t in new.teams for m in (t.allowed_models or []) if m not in known}
    if unknown:
        logger.error("config reload refused: teams allow models not running: %s", unknown)
        return {"reloaded": False, "errors": [f"unknown models {sorted(unknown)}"]}
    restart = needs_restart(gw.config, new)
    # A classifier a team names now, or one rewritten since (routegate learn --out
    # the same directory), is read here; the unchanged ones are kept as they are.
    classifiers = await asyncio.to_thread(load_team_classifiers, new, gw.team_classifiers)
    named = {t.classifier for t in new.teams if t.classifier}
    config = gw.config.model_copy(update={"teams": new.teams})
    keyring = KeyRing.from_config(config)
    # Everything built: now applied together, with no await in between.
    gw.router.use_team_classifiers({path: model for path, (model, _) in classifiers.items()})
    gw.team_classifiers, gw.config, gw.keyring = classifiers, config, keyring
    logger.info("reloaded %d teams from %s", len(new.teams), gw.config_path)
    if restart:
        logger.warning("config reload applied teams only: restart to apply %s (changed in %s; "
                       "the old values stay in force until then)", ", ".join(restart), gw.config_path)
    result: dict[str, Any] = {"reloaded": True, "teams": [t.name for t in new.teams],
                              "needs_restart": restart}
    if named - set(classifiers):   # no good copy: routing.classifier (logged)
        result["classifiers_unavailable"] = sorted(named - set(classifiers))
    return result


def _watched(gw: AppState) -> tuple[int | None, dict[str, Stamp]]:
    """The config file's mtime and the stamps of the classifier artifacts its
    teams name. Blocking (stat calls): run it in a thread."""
    assert gw.config_path is not None
    try:
        config = os.stat(gw.config_path).st_mtime_ns
    except OSError:
        config = None
    named = {t.classifier for t in gw.config.teams if t.classifier}
    return config, {path: artifact_stamp(path) for path in sorted(named)}


async def reload_logged(gw: AppState) -> None:
    """A reload nobody waits for (the watcher, SIGHUP): a failure is logged, and
    the watcher lives on."""
    try:
        await reload_teams(gw)
    except Exception:
        logger.exception("config reload failed; the running config stays in force")


async def watch_config(gw: AppState) -> None:
    """Poll the file's mtime, and the named classifiers' (a ``routegate learn``
    or a copy into the same directory); reload when one changes. What changes
    while a reload runs is seen by the next poll: the state compared is the one
    read before the reload."""
    last = await asyncio.to_thread(_watched, gw)
    # An artifact rewritten between its load at start and now.
    if any(gw.team_classifiers[path][1] != stamp for path, stamp in last[1].items()
           if path in gw.team_classifiers):
        await reload_logged(gw)
    while True:
        await asyncio.sleep(WATCH_INTERVAL_S)
        now = await asyncio.to_thread(_watched, gw)
        if now != last and now[0] is not None:
            last = now
            await reload_logged(gw)
