"""The work queue: one Redis Stream, one consumer group shared by every replica.

    queue = WorkQueue(redis, keys)
    await queue.ensure_group()
    await queue.enqueue("batch_ab12", lines)                 # one entry per line
    items = await queue.read_new("host-1234-ab", count=8)    # [(entry id, WorkItem)]
    items = await queue.claim_stale("host-1234-ab", idle_s=30, count=8)
    await queue.done(entry_id)

An entry names the line (batch, index, byte range in the input file), not its
body: the stream stays small and the body is read from the blob store. An
entry stays pending until ``done``; one whose worker died is taken over with
XAUTOCLAIM, and ``heartbeat`` keeps a slow line's entry from looking dead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from batch.jsonl import Line
from batch.keys import GROUP, BatchKeys

ENQUEUE_CHUNK = 500


@dataclass(frozen=True, slots=True)
class WorkItem:
    batch_id: str
    index: int
    offset: int
    length: int


def _item(fields: dict[Any, Any]) -> WorkItem:
    f = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}
    batch = f["b"].decode() if isinstance(f["b"], bytes) else f["b"]
    return WorkItem(batch, int(f["i"]), int(f["o"]), int(f["n"]))


def _entries(raw: Iterable[Any]) -> list[tuple[str, WorkItem]]:
    out = []
    for entry_id, fields in raw:
        if fields:  # a deleted entry still pending comes back without fields
            out.append((entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
                        _item(fields)))
    return out


class WorkQueue:
    def __init__(self, redis: Any, keys: BatchKeys) -> None:
        self.redis = redis
        self.stream = keys.queue
        self._claim_cursor = "0-0"

    async def ensure_group(self) -> None:
        """Create the consumer group (idempotent); from id 0 so no entry is skipped."""
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, batch_id: str, lines: Iterable[tuple[int, Line]]) -> int:
        count = 0
        pipe = self.redis.pipeline(transaction=False)
        for index, line in lines:
            pipe.xadd(self.stream, {"b": batch_id, "i": index, "o": line.offset, "n": line.length})
            count += 1
            if count % ENQUEUE_CHUNK == 0:
                await pipe.execute()
                pipe = self.redis.pipeline(transaction=False)
        await pipe.execute()
        return count

    async def read_new(self, consumer: str, count: int) -> list[tuple[str, WorkItem]]:
        try:
            reply = await self.redis.xreadgroup(GROUP, consumer, {self.stream: ">"}, count=count)
        except ResponseError as exc:
            await self._recreate_group(exc)
            return []
        return _entries(reply[0][1]) if reply else []

    async def _recreate_group(self, exc: ResponseError) -> None:
        # The group is gone: a Redis that lost its data (a restart without AOF),
        # or a worker that started before the first batch made the stream.
        if "NOGROUP" not in str(exc):
            raise exc
        await self.ensure_group()

    async def claim_stale(self, consumer: str, idle_s: float, count: int
                          ) -> list[tuple[str, WorkItem]]:
        """Entries another worker has held for ``idle_s`` without a heartbeat."""
        try:
            reply = await self.redis.xautoclaim(self.stream, GROUP, consumer,
                                                min_idle_time=int(idle_s * 1000),
                                                start_id=self._claim_cursor, count=count)
        except ResponseError as exc:
            await self._recreate_group(exc)
            return []
        cursor = reply[0]
        self._claim_cursor = cursor.decode() if isinstance(cursor, bytes) else cursor
        return _entries(reply[1])

    async def heartbeat(self, consumer: str, entry_ids: list[str]) -> None:
        """Reset the idle time of the entries this worker is running."""
        if entry_ids:
            await self.redis.xclaim(self.stream, GROUP, consumer, 0, entry_ids, justid=True)

    async def done(self, entry_id: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.xack(self.stream, GROUP, entry_id)
        pipe.xdel(self.stream, entry_id)
        await pipe.execute()
