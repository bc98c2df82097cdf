"""A replica's holds are leases: it renews them every second, with what each request
has run up, so that a replica that dies frees its holds within a lease
(``budget.reservation_ttl_s``) and is billed what its requests had run up a
second before (``renew.lua``).

    leases = Leases(scripts, lease_s=10, stopping=event, suspect_down=f, mark_down=g)
    leases.hold(reservation)       # reserved in Redis
    leases.release(reservation)    # settled
    await leases.run()             # the background task: one call per team in flight
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from budget.failures import REDIS_UNAVAILABLE
from budget.reservation import Reservation
from budget.scripts import BudgetScripts

log = logging.getLogger(__name__)

RENEW_EVERY_S = 1.0               # one call per team with requests in flight, at most


class Leases:
    """The holds in Redis this replica has not settled yet, per team."""

    def __init__(self, scripts: BudgetScripts, lease_s: int, stopping: asyncio.Event,
                 suspect_down: Callable[[], bool],
                 mark_down: Callable[[str, BaseException], None]) -> None:
        self._scripts = scripts
        self.lease_s = lease_s
        self._stopping = stopping
        self._suspect_down, self._mark_down = suspect_down, mark_down
        self._holds: dict[str, dict[str, Reservation]] = {}

    def hold(self, res: Reservation) -> None:
        self._holds.setdefault(res.team, {})[res.request_id] = res

    def release(self, res: Reservation) -> None:
        held = self._holds.get(res.team)
        if held is not None and held.pop(res.request_id, None) is not None and not held:
            del self._holds[res.team]

    async def renew(self) -> int:
        """Renew every hold, with what each has run up so far; returns how many Redis
        still held. One call per team."""
        renewed = 0
        for team, holds in list(self._holds.items()):
            args = [(rid, progress_json(res, self._scripts.stable_ttl_s))
                    for rid, res in list(holds.items())]
            try:
                renewed += await self._scripts.renew(team, args)
            except REDIS_UNAVAILABLE as exc:
                self._mark_down("renew", exc)
                return renewed
        return renewed

    async def run(self) -> None:
        """Background task: renew every second (or third of the lease, if shorter)."""
        interval = min(RENEW_EVERY_S, self.lease_s / 3)
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), interval)
            except TimeoutError:
                pass
            if self._holds and not self._suspect_down():
                try:
                    await self.renew()
                except Exception:      # keep renewing; never kill the task
                    log.exception("budget: renewing leases failed")


def progress_json(res: Reservation, stable_ttl_s: int) -> str:
    """The hold's progress record for renew.lua ("" while there is none). A stable
    id's carries its run order (``s``) and how long its bill is kept (``x``, s):
    billed at expiry, it is a run's bill like a settle's (``bill_progress``)."""
    progress = res.progress() if res.progress is not None else None
    if progress is None:
        return ""
    model, input_tokens, output_tokens, cost = progress
    record = {"d": res.windows.day, "m": model, "k": res.key_id or "",
              "i": input_tokens, "o": output_tokens, "c": cost}
    if res.stable:
        record |= {"s": res.run_order, "x": stable_ttl_s}
    return json.dumps(record)
