"""Batch metadata and state in Redis: what the API and the workers share.

    store = BatchStore(redis, BatchKeys("rgb"))
    fields = await store.create(owner, input_file_fields, window="24h", window_s=86400,
                                metadata=None, now=time.time(), output_expires_s=None)
    gate, run = await store.start_line(batch_id, custom_id, now)   # ("go", 1), ("stop", 0)...
    await store.record(batch_id, custom_id, value, ok=True, tokens=(12, 30), run=run)

A batch is one hash (``meta``) plus its results hash, both under the batch's
hash tag; per-team sorted sets list them, and ``active`` holds the ids the
sweepers still have to look at.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from batch.files import page, page_start
from batch.keys import BatchKeys
from batch.records import Owner, batch_object, decode, new_batch_id
from batch.scripts import ABANDON, FINISH, RECORD, RELEASE, SEAL, START_LINE, TRANSITION
from core.errors import NotFound

CANCELLABLE = ("validating", "in_progress")


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class BatchStore:
    def __init__(self, redis: Any, keys: BatchKeys) -> None:
        self.redis = redis
        self.keys = keys
        self._start = redis.register_script(START_LINE)
        self._record = redis.register_script(RECORD)
        self._abandon = redis.register_script(ABANDON)
        self._transition = redis.register_script(TRANSITION)
        self._finish = redis.register_script(FINISH)
        self._release = redis.register_script(RELEASE)
        self._seal = redis.register_script(SEAL)


    async def create(self, owner: Owner, input_file: dict[str, str], *, window: str,
                     window_s: int, metadata: dict[str, str] | None, now: float,
                     output_expires_s: int | None = None) -> str:
        batch_id = new_batch_id()
        fields = {"id": batch_id, "endpoint": "/v1/chat/completions",
                  "input_file_id": input_file["id"], "completion_window": window,
                  "status": "validating", "created_at": int(now),
                  "expires_at": int(now) + window_s, "total": input_file.get("lines", "0"),
                  "completed": 0, "failed": 0, "inflight": 0, "team": owner.team,
                  "key_hash": owner.key_hash,
                  "metadata": orjson.dumps(metadata).decode() if metadata else "",
                  "output_expires_s": output_expires_s or ""}
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.meta(batch_id), mapping=fields)
        pipe.zadd(self.keys.team_batches(owner.team), {batch_id: int(now * 1e6)})
        pipe.sadd(self.keys.active, batch_id)
        await pipe.execute()
        return batch_id

    async def discard(self, owner: Owner, batch_id: str) -> None:
        """Forget a batch that could not start (its input file went as it was created)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.srem(self.keys.active, batch_id)
        pipe.zrem(self.keys.team_batches(owner.team), batch_id)
        pipe.delete(self.keys.meta(batch_id))
        await pipe.execute()

    async def fields(self, batch_id: str) -> dict[str, str]:
        return decode(await self.redis.hgetall(self.keys.meta(batch_id)))

    async def owned(self, owner: Owner, batch_id: str) -> dict[str, str]:
        fields = await self.fields(batch_id)
        if not fields or fields.get("team") != owner.team:
            raise NotFound(f"No such Batch object: {batch_id}", param="batch_id")
        return fields

    async def get(self, owner: Owner, batch_id: str) -> dict[str, Any]:
        return batch_object(await self.owned(owner, batch_id))

    async def list_page(self, owner: Owner, *, after: str | None, limit: int) -> dict[str, Any]:
        index = self.keys.team_batches(owner.team)
        start = await page_start(self.redis, index, after, descending=True)
        ids = await page(self.redis, index, start, limit + 1, descending=True)
        pipe = self.redis.pipeline(transaction=False)
        for batch_id in ids:
            pipe.hgetall(self.keys.meta(batch_id))
        data = [batch_object(decode(raw)) for raw in await pipe.execute() if raw]
        has_more = len(data) > limit
        data = data[:limit]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": has_more}

    async def cancel(self, owner: Owner, batch_id: str, now: float) -> dict[str, Any] | None:
        """The batch, now cancelling; None when its state does not allow a cancel."""
        await self.owned(owner, batch_id)
        moved = await self.transition(batch_id, CANCELLABLE, "cancelling",
                                      cancelling_at=int(now), target="cancelled")
        return await self.get(owner, batch_id) if moved else None


    async def transition(self, batch_id: str, from_states: tuple[str, ...], to: str,
                         **fields: Any) -> str | None:
        """Move to ``to`` only from ``from_states``; returns the state it left, or None."""
        args: list[Any] = [",".join(from_states), to]
        for name, value in fields.items():
            args += [name, value]
        prev = await self._transition(keys=[self.keys.meta(batch_id)], args=args)
        return _str(prev) if prev else None


    async def start_line(self, batch_id: str, custom_id: str, now: float) -> tuple[str, int]:
        """(the gate: go, done, wait, stop, expired or gone; for go, the run's
        generation: 1 for the line's first run, 2 for a run taken over, ...)."""
        gate, run = await self._start(keys=[self.keys.meta(batch_id),
                                             self.keys.results(batch_id),
                                             self.keys.runs(batch_id)], args=[now, custom_id])
        return _str(gate), int(run)

    async def record(self, batch_id: str, custom_id: str, value: bytes, *, ok: bool,
                     tokens: tuple[int, int], run: int, unbilled: bool = False
                     ) -> tuple[int, int, int]:
        """(1 if recorded now, 0 if it already was, -1 if sealed, -2 if a later run
        of the line started: only the last may record; lines done; total).
        ``unbilled``: a failure that billed nothing, which an earlier run's refused
        good answer replaces (its bill is the one kept)."""
        reply = await self._record(
            keys=[self.keys.meta(batch_id), self.keys.results(batch_id),
                  self.keys.runs(batch_id), self.keys.fallbacks(batch_id)],
            args=[custom_id, value, "completed" if ok else "failed", tokens[0], tokens[1], run,
                  "1" if unbilled else "0"])
        return int(reply[0]), int(reply[1]), int(reply[2])

    async def still_open(self, batch_id: str, now: float) -> bool:
        """Whether the batch may still start lines: in progress and inside its window."""
        status, expires_at = await self.redis.hmget(self.keys.meta(batch_id), "status",
                                                    "expires_at")
        return (status is not None and _str(status) == "in_progress"
                and expires_at is not None and now < int(expires_at))

    async def abandon_line(self, batch_id: str) -> None:
        await self._abandon(keys=[self.keys.meta(batch_id)])

    async def active_ids(self) -> list[str]:
        return sorted(_str(m) for m in await self.redis.smembers(self.keys.active))

    async def deactivate(self, batch_id: str) -> None:
        await self.redis.srem(self.keys.active, batch_id)


    async def lock_finalizer(self, batch_id: str, token: str, lease_s: float) -> bool:
        return bool(await self.redis.set(self.keys.finalizer(batch_id), token, nx=True,
                                         px=int(lease_s * 1000)))

    async def release_finalizer(self, batch_id: str, token: str) -> None:
        await self._release(keys=[self.keys.finalizer(batch_id)], args=[token])

    async def seal(self, batch_id: str) -> dict[str, str]:
        """Refuse every later result (a line whose last run never recorded gets the
        answer an earlier run's refused record left), then read the batch as it will
        be written."""
        await self._seal(keys=[self.keys.meta(batch_id), self.keys.results(batch_id),
                               self.keys.fallbacks(batch_id)])
        return await self.fields(batch_id)

    async def results(self, batch_id: str) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        # HSCAN in pages: one HGETALL of 50,000 results could outlast the socket timeout.
        async for field, value in self.redis.hscan_iter(self.keys.results(batch_id), count=1000):
            out[_str(field)] = value
        return out

    async def finish(self, batch_id: str, token: str, output_file_id: str | None,
                     error_file_id: str | None, now: float | None = None) -> bool:
        keys = [self.keys.meta(batch_id), self.keys.finalizer(batch_id),
                self.keys.results(batch_id), self.keys.runs(batch_id),
                self.keys.fallbacks(batch_id)]
        stamp = int(now if now is not None else time.time())
        return bool(await self._finish(keys=keys, args=[token, stamp, output_file_id or "",
                                                       error_file_id or ""]))
