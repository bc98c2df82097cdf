"""When a file's bytes may go: deletes, expiry, and the batches still reading a file.

    retention = Retention(redis, BatchKeys("rgb"), blobs)
    await retention.hold("search", file_id, batch_id, now)   # False: deleted or expired
    await retention.release("search", file_id, batch_id)     # that batch has ended
    await retention.remove("search", file_id, now)           # out of view now
    await retention.sweep(now, limit=100)                    # every replica, every sweep

A removed file leaves its team's view at once. Its blob and metadata go, and
its bytes leave the team's quota, only once no batch holds it: a batch whose
input file is deleted (or expires) mid-run keeps reading its lines, and the
last holder to end removes it. ``files_due`` lists every file a sweep has to
look at: one whose expiry time has come, a removal a crash interrupted, or a
held file to look at again (its holders may have died).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from batch.blobs import BlobStore
from batch.file_scripts import HIDE, HOLD, PURGE, RELEASE
from batch.keys import BatchKeys
from batch.records import TERMINAL

log = logging.getLogger("routegate.batch")

# A held file is looked at again this often, in case a holder ended without
# releasing it (a crash between its terminal state and the release).
HELD_RECHECK_S = 60.0
HOLDER = "held_by:"


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Retention:
    def __init__(self, redis: Any, keys: BatchKeys, blobs: BlobStore) -> None:
        self.redis = redis
        self.keys = keys
        self.blobs = blobs
        self._hold = redis.register_script(HOLD)
        self._release = redis.register_script(RELEASE)
        self._hide = redis.register_script(HIDE)
        self._purge = redis.register_script(PURGE)

    async def hold(self, team: str, file_id: str, batch_id: str, now: float) -> bool:
        """Keep the file's bytes for ``batch_id``; False if it is gone, deleted or expired."""
        return bool(await self._hold(keys=[self.keys.file(team, file_id)], args=[batch_id, now]))

    async def release(self, team: str, file_id: str, batch_id: str) -> None:
        """``batch_id`` no longer reads the file (idempotent); a removed file then goes."""
        if await self._release(keys=[self.keys.file(team, file_id)], args=[batch_id]):
            await self.remove(team, file_id, time.time())

    async def remove(self, team: str, file_id: str, now: float) -> None:
        """Take the file out of view now; its bytes go now, or when its last holder ends."""
        # Listed first: a replica that dies part-way leaves the rest to the sweep.
        await self.redis.zadd(self.keys.files_due, {f"{team}/{file_id}": now})
        await self._settle(team, file_id, now, check_holders=False)

    async def sweep(self, now: float, limit: int) -> int:
        """Remove up to ``limit`` files whose time has come; returns how many were looked at."""
        due = await self.redis.zrangebyscore(self.keys.files_due, "-inf", now, start=0, num=limit)
        for member in map(_str, due):
            team, _, file_id = member.partition("/")
            try:
                await self._settle(team, file_id, now, check_holders=True)
            except Exception:
                log.exception("file %s of team %s: could not remove it", file_id, team)
        return len(due)

    async def _settle(self, team: str, file_id: str, now: float, *, check_holders: bool) -> None:
        member = f"{team}/{file_id}"
        holders = int(await self._hide(keys=[self.keys.file(team, file_id),
                                             self.keys.team_files(team)], args=[file_id]))
        if holders > 0 and check_holders:
            holders = await self._drop_dead_holders(team, file_id)
        if holders > 0:
            # Its last holder's release removes it; this look again is only the backstop.
            await self.redis.zadd(self.keys.files_due, {member: now + HELD_RECHECK_S})
            return
        if holders == 0:
            # Hidden and held by nobody: no batch can take it any more, so the
            # blob goes first, then the metadata and the quota in one step.
            await asyncio.to_thread(self.blobs.delete, file_id)
            freed = await self._purge(keys=[self.keys.file(team, file_id),
                                            self.keys.storage(team)])
            if int(freed) >= 0:
                log.info("file %s of team %s removed (%s bytes freed)", file_id, team, freed)
        await self.redis.zrem(self.keys.files_due, member)

    async def _drop_dead_holders(self, team: str, file_id: str) -> int:
        """Release the file from holders whose batch has ended or vanished; how many remain."""
        key = self.keys.file(team, file_id)
        fields = [_str(f) for f in await self.redis.hkeys(key)]
        for batch_id in (f[len(HOLDER):] for f in fields if f.startswith(HOLDER)):
            status = await self.redis.hget(self.keys.meta(batch_id), "status")
            if status is None or _str(status) in TERMINAL:
                await self._release(keys=[key], args=[batch_id])
        return int(await self.redis.hget(key, "holders") or 0)
