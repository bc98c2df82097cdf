"""Files: bytes in a blob store, metadata in Redis, visible only to the owning team.

    files = FileStore(redis, BatchKeys("rgb"), DirectoryBlobStore(root))
    obj = await files.create(owner, "requests.jsonl", "batch", fileobj, lines=120)
    await files.get(owner, obj["id"])        # NotFound for any other team
    await files.list_page(owner, purpose=None, limit=100, order="desc", after=None)

Listing pages by a per-team sorted set (score: creation time in microseconds),
so ``after`` is one ZRANK away.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, BinaryIO

from batch.blobs import BlobStore
from batch.keys import BatchKeys
from batch.records import Owner, decode, file_object, new_file_id
from core.errors import NotFound


class FileStore:
    def __init__(self, redis: Any, keys: BatchKeys, blobs: BlobStore) -> None:
        self.redis = redis
        self.keys = keys
        self.blobs = blobs

    async def create(self, owner: Owner, filename: str, purpose: str, src: BinaryIO, *,
                     lines: int) -> dict[str, Any]:
        file_id = new_file_id()
        size = await asyncio.to_thread(self.blobs.put, file_id, src)
        return await self._register(owner, file_id, filename, purpose, size, lines)

    async def create_bytes(self, owner: Owner, filename: str, purpose: str, data: bytes
                           ) -> dict[str, Any]:
        file_id = new_file_id()
        size = await asyncio.to_thread(self.blobs.put_bytes, file_id, data)
        return await self._register(owner, file_id, filename, purpose, size, data.count(b"\n"))

    async def _register(self, owner: Owner, file_id: str, filename: str, purpose: str,
                        size: int, lines: int) -> dict[str, Any]:
        now_us = int(time.time() * 1e6)
        fields = {"id": file_id, "bytes": str(size), "created_at": str(now_us // 1_000_000),
                  "filename": filename, "purpose": purpose, "lines": str(lines),
                  "team": owner.team, "key_hash": owner.key_hash}
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.file(file_id), mapping=fields)
        pipe.zadd(self.keys.team_files(owner.team), {file_id: now_us})
        await pipe.execute()
        return fields

    async def fields(self, owner: Owner, file_id: str) -> dict[str, str]:
        """The stored fields of the team's file; NotFound for a missing or foreign one."""
        fields = decode(await self.redis.hgetall(self.keys.file(file_id)))
        if not fields or fields.get("team") != owner.team:
            raise NotFound(f"No such File object: {file_id}", param="file_id")
        return fields

    async def get(self, owner: Owner, file_id: str) -> dict[str, Any]:
        return file_object(await self.fields(owner, file_id))

    async def list_page(self, owner: Owner, *, purpose: str | None, limit: int, order: str,
                   after: str | None) -> dict[str, Any]:
        index = self.keys.team_files(owner.team)
        data: list[dict[str, Any]] = []
        has_more = False
        start = await page_start(self.redis, index, after, descending=order == "desc")
        # Filtering by purpose can drop rows, so read in pages until limit is met.
        while len(data) <= limit:
            ids = await page(self.redis, index, start, limit + 1, descending=order == "desc")
            if not ids:
                break
            start += len(ids)
            for fields in await self._many(ids):
                if purpose is None or fields.get("purpose") == purpose:
                    data.append(file_object(fields))
        if len(data) > limit:
            data, has_more = data[:limit], True
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": has_more}

    async def _many(self, ids: list[str]) -> list[dict[str, str]]:
        pipe = self.redis.pipeline(transaction=False)
        for file_id in ids:
            pipe.hgetall(self.keys.file(file_id))
        return [decode(raw) for raw in await pipe.execute() if raw]

    async def delete(self, owner: Owner, file_id: str) -> dict[str, Any]:
        await self.fields(owner, file_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.delete(self.keys.file(file_id))
        pipe.zrem(self.keys.team_files(owner.team), file_id)
        await pipe.execute()
        await asyncio.to_thread(self.blobs.delete, file_id)
        return {"id": file_id, "object": "file", "deleted": True}


async def page_start(redis: Any, index: str, after: str | None, *, descending: bool) -> int:
    """Where a page after the object ``after`` begins (0 without a cursor)."""
    if not after:
        return 0
    rank = await (redis.zrevrank(index, after) if descending else redis.zrank(index, after))
    return 0 if rank is None else rank + 1


async def page(redis: Any, index: str, start: int, count: int, *, descending: bool) -> list[str]:
    read = redis.zrevrange if descending else redis.zrange
    return [m.decode() if isinstance(m, bytes) else m for m in
            await read(index, start, start + count - 1)]
