"""Files: bytes in a blob store, metadata in Redis, visible only to the owning team.

    files = FileStore(redis, BatchKeys("rgb"), DirectoryBlobStore(root),
                      quota_bytes=10 * 1024**3, default_expiry_s=30 * 86400)
    obj = await files.create(owner, "requests.jsonl", "batch", fileobj, lines=120,
                             expires_after_s=3600)   # None: the default expiry
    await files.get(owner, obj["id"])        # NotFound for any other team, or once removed
    await files.list_page(owner, purpose=None, limit=100, order="desc", after=None)
    await files.delete(owner, obj["id"])     # out of view now; bytes go when no batch reads them

Every stored file counts against its team's storage quota. An upload holds
its room with one atomic reservation before its bytes are written, so two
uploads never both pass on the same headroom; a batch's output files are
counted but never refused. Listing pages by a per-team sorted set (score:
creation time in microseconds), so ``after`` is one ZRANK away.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, BinaryIO

from batch.blobs import BlobStore
from batch.file_scripts import COMMIT, RESERVE, UNRESERVE
from batch.keys import BatchKeys
from batch.records import Owner, decode, file_object, new_file_id
from batch.retention import Retention
from core.errors import InvalidRequest, NotFound

DEFAULT_QUOTA_BYTES = 10 * 1024**3
# An upload's hold lapses after this long without being committed (its
# replica died mid-upload): writing 100 MiB takes seconds, not minutes.
RESERVATION_S = 900


def visible(fields: dict[str, str], now: float) -> bool:
    """Neither deleted nor past its expiry (the sweep may not have removed it yet)."""
    expires_at = fields.get("expires_at")
    return fields.get("deleted") != "1" and not (expires_at and int(expires_at) <= now)


def quota_refusal(team: str, taken: int, size: int, quota: int) -> InvalidRequest:
    return InvalidRequest(
        f"Team {team!r} has {taken} of its {quota} bytes of file storage in use or being "
        f"uploaded, so this {size}-byte file does not fit. Delete files, or let them expire, "
        "to make room.", param="file", code="storage_quota_exceeded")


def _remaining(src: BinaryIO) -> int:
    start = src.tell()
    end = src.seek(0, os.SEEK_END)
    src.seek(start)
    return end - start


class FileStore:
    def __init__(self, redis: Any, keys: BatchKeys, blobs: BlobStore, *,
                 quota_bytes: int = DEFAULT_QUOTA_BYTES, default_expiry_s: int | None = None
                 ) -> None:
        self.redis = redis
        self.keys = keys
        self.blobs = blobs
        self.quota_bytes = quota_bytes
        self.default_expiry_s = default_expiry_s or None
        self.retention = Retention(redis, keys, blobs)
        self._reserve = redis.register_script(RESERVE)
        self._unreserve = redis.register_script(UNRESERVE)
        self._commit = redis.register_script(COMMIT)

    async def check_room(self, owner: Owner, size: int) -> None:
        """Refuse at once an upload that cannot fit (before its body is read)."""
        used, reserved = await self.redis.hmget(self.keys.storage(owner.team), "used", "reserved")
        taken = int(used or 0) + int(reserved or 0)
        if taken + size > self.quota_bytes:
            raise quota_refusal(owner.team, taken, size, self.quota_bytes)

    async def create(self, owner: Owner, filename: str, purpose: str, src: BinaryIO, *,
                     lines: int, expires_after_s: int | None = None) -> dict[str, Any]:
        """Store ``src`` (from its position) if the team's quota has room for it."""
        file_id, size = new_file_id(), _remaining(src)
        team_keys = [self.keys.storage(owner.team), self.keys.reservations(owner.team)]
        member = f"{file_id}:{size}"
        held, taken = await self._reserve(keys=team_keys, args=[
            time.time(), time.time() + RESERVATION_S, member, size, self.quota_bytes])
        if not held:
            raise quota_refusal(owner.team, int(taken), size, self.quota_bytes)
        try:
            await asyncio.to_thread(self.blobs.put, file_id, src)
            return await self._register(owner, file_id, filename, purpose, size, lines,
                                        expires_after_s, reservation=member)
        except BaseException:
            await asyncio.shield(self._give_back(file_id, team_keys, member, size))
            raise

    async def _give_back(self, file_id: str, team_keys: list[str], member: str, size: int
                         ) -> None:
        await asyncio.to_thread(self.blobs.delete, file_id)
        await self._unreserve(keys=team_keys, args=[member, size])

    async def create_bytes(self, owner: Owner, filename: str, purpose: str, data: bytes, *,
                           expires_after_s: int | None = None) -> dict[str, Any]:
        """A file the gateway writes (a batch's output): counted, never refused."""
        file_id = new_file_id()
        size = await asyncio.to_thread(self.blobs.put_bytes, file_id, data)
        return await self._register(owner, file_id, filename, purpose, size, data.count(b"\n"),
                                    expires_after_s, reservation="")

    async def _register(self, owner: Owner, file_id: str, filename: str, purpose: str,
                        size: int, lines: int, expires_after_s: int | None, *,
                        reservation: str) -> dict[str, Any]:
        now_us = int(time.time() * 1e6)
        created = now_us // 1_000_000
        lifetime = expires_after_s or self.default_expiry_s
        fields = {"id": file_id, "bytes": str(size), "created_at": str(created),
                  "expires_at": str(created + lifetime) if lifetime else "",
                  "filename": filename, "purpose": purpose, "lines": str(lines),
                  "team": owner.team, "key_hash": owner.key_hash}
        if lifetime:
            # Listed before it exists: a replica dying in between leaves only an
            # entry the sweep drops, never a file that does not expire.
            await self.redis.zadd(self.keys.files_due,
                                  {f"{owner.team}/{file_id}": created + lifetime})
        pairs = [item for pair in fields.items() for item in pair]
        await self._commit(keys=[self.keys.storage(owner.team), self.keys.reservations(owner.team),
                                 self.keys.file(owner.team, file_id),
                                 self.keys.team_files(owner.team)],
                           args=[reservation, size, now_us, file_id, *pairs])
        return fields

    async def fields(self, owner: Owner, file_id: str) -> dict[str, str]:
        """The stored fields of the team's file; NotFound for a missing, foreign or removed one."""
        fields = decode(await self.redis.hgetall(self.keys.file(owner.team, file_id)))
        if not fields or fields.get("team") != owner.team or not visible(fields, time.time()):
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
        now = time.time()
        # Filtering (purpose, expiry) can drop rows, so read in pages until limit is met.
        while len(data) <= limit:
            ids = await page(self.redis, index, start, limit + 1, descending=order == "desc")
            if not ids:
                break
            start += len(ids)
            for fields in await self._many(owner.team, ids):
                if (purpose is None or fields.get("purpose") == purpose) and visible(fields, now):
                    data.append(file_object(fields))
        if len(data) > limit:
            data, has_more = data[:limit], True
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": has_more}

    async def _many(self, team: str, ids: list[str]) -> list[dict[str, str]]:
        pipe = self.redis.pipeline(transaction=False)
        for file_id in ids:
            pipe.hgetall(self.keys.file(team, file_id))
        return [decode(raw) for raw in await pipe.execute() if raw]

    async def delete(self, owner: Owner, file_id: str) -> dict[str, Any]:
        """Gone from the team's view at once; the bytes wait for the batches reading them."""
        await self.fields(owner, file_id)
        await self.retention.remove(owner.team, file_id, time.time())
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
