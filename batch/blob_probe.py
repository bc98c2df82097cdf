"""Whether this replica reads the file bytes the other live replicas write.

    probe = SharedStoreProbe(redis, blobs, keys, replicas_key="rg:sched:replicas",
                             replica="host-a-123")
    task = asyncio.create_task(probe.run())
    probe.problem      # None, or why this replica must not do batch work

For a store that is only as shared as its directory (``local``). Each
replica writes a small probe blob holding its own id and names it in
``keys.blob_probes``; every few seconds it reads the probes of the replicas
that beat in the fleet's heartbeat (``scheduling/fleet.py``). One it cannot
read means the replicas do not share the store: uploads through one would
be missing on the other, so this replica logs an error naming the fix and
refuses batch work until the check passes, instead of failing batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

from batch.blobs import BlobMissing, BlobStore
from batch.keys import BatchKeys
from batch.records import decode
from core.aio import raise_if_cancelled

log = logging.getLogger("routegate.batch")

CHECK_EVERY_S = 2.0
LIVE_WINDOW_S = 3.0   # the fleet heartbeat's window (scheduling/fleet.py)


class SharedStoreProbe:
    def __init__(self, redis: Any, blobs: BlobStore, keys: BatchKeys, *, replicas_key: str,
                 replica: str, live_window_s: float = LIVE_WINDOW_S) -> None:
        self.redis, self.blobs, self.keys = redis, blobs, keys
        self.replicas_key = replicas_key
        self.replica = replica
        self.live_window_s = live_window_s
        self.blob_key = f"probe-{secrets.token_hex(8)}"
        self.problem: str | None = None
        self._written = False

    async def publish(self) -> None:
        """The probe blob once; its name each time (it comes back after a Redis restart)."""
        if not self._written:
            await asyncio.to_thread(self.blobs.put_bytes, self.blob_key, self.replica.encode())
            self._written = True
        await self.redis.hset(self.keys.blob_probes, self.replica, self.blob_key)

    async def check(self) -> str | None:
        """Why this replica does not share the others' store, or None."""
        live = await self.redis.zrangebyscore(self.replicas_key,
                                              time.time() - self.live_window_s, "+inf")
        probes = decode(await self.redis.hgetall(self.keys.blob_probes))
        for other in sorted(_text(r) for r in live):
            blob = probes.get(other)
            if other == self.replica or blob is None:
                continue
            try:
                seen = await asyncio.to_thread(self.blobs.read_range, blob, 0, 256)
            except (BlobMissing, ValueError):
                seen = b""
            if seen != other.encode():
                return (f"Replica {self.replica} cannot read the files that live replica "
                        f"{other} writes: {self.blobs.describe()} is not shared. Set "
                        "batch.blob_store: redis (or s3) on every replica, or give them one "
                        "shared data_dir. Until then this replica refuses batch work.")
        return None

    async def run(self, every_s: float = CHECK_EVERY_S) -> None:
        try:
            while True:
                raise_if_cancelled()
                try:
                    await self.publish()
                    problem = await self.check()
                except Exception as exc:   # Redis down: keep the last verdict
                    log.debug("blob store probe failed: %r", exc)
                else:
                    if problem != self.problem:
                        if problem:
                            log.error("batch: %s", problem)
                        else:
                            log.info("batch: blob store check passed; batch work resumes")
                        self.problem = problem
                await asyncio.sleep(every_s)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._leave())

    async def _leave(self) -> None:
        await self.redis.hdel(self.keys.blob_probes, self.replica)
        await asyncio.to_thread(self.blobs.delete, self.blob_key)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
