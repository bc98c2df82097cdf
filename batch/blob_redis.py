"""File bytes in Redis, chunked, so that every replica sharing the Redis reads them.

    blobs = RedisBlobStore(redis.Redis.from_url(url), "rgb")   # or a RedisCluster
    blobs.put("file-ab12...", upload_fileobj)
    blobs.read_range("file-ab12...", offset=120, length=88)

A blob is a manifest hash (``size``, ``chunk``, ``gen``) and its chunks,
``chunk_bytes`` each. The chunks are written first under a fresh generation
with a lease, then one MULTI makes them permanent and writes the manifest: a
reader sees the whole blob or none, and a put cut off half-way leaves only
chunks whose lease runs out. All keys of one blob share the hash tag
``{blob:<key>}``, so the MULTI and the pipelined reads work on a Redis
Cluster too. The quota, expiry and deletion of the bytes are the file
store's (``files.py``, ``retention.py``), whatever the store.

The client is redis-py's synchronous one: like every ``BlobStore``, callers
run the methods in a thread (``asyncio.to_thread``), never on the event loop.
"""

from __future__ import annotations

import io
import secrets
from typing import Any, BinaryIO

from batch.blobs import BlobMissing, check_key
from batch.records import decode

CHUNK_BYTES = 1024 * 1024
# Chunks of a put that has not committed expire after this long.
PENDING_LEASE_S = 3600


class RedisBlobStore:
    def __init__(self, client: Any, prefix: str, *, chunk_bytes: int = CHUNK_BYTES,
                 replica: str = "") -> None:
        self.client = client
        self.prefix = prefix
        self.chunk_bytes = chunk_bytes
        self.replica = replica

    def describe(self) -> str:
        return f"the redis blob store (keys {self.prefix}:{{blob:*}})"

    def _manifest(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}:{{blob:{key}}}"

    def _chunk(self, key: str, gen: str, n: int) -> str:
        return f"{self.prefix}:{{blob:{key}}}:{gen}:{n}"

    def put(self, key: str, src: BinaryIO) -> int:
        manifest = self._manifest(key)
        gen = secrets.token_hex(6)
        size = n = 0
        while chunk := src.read(self.chunk_bytes):
            self.client.set(self._chunk(key, gen, n), chunk, ex=PENDING_LEASE_S)
            size += len(chunk)
            n += 1
        old = self.client.hgetall(manifest)
        pipe = self.client.pipeline(transaction=True)
        for i in range(n):
            pipe.persist(self._chunk(key, gen, i))
        pipe.hset(manifest, mapping={"size": size, "chunk": self.chunk_bytes, "gen": gen,
                                     "chunks": n})
        pipe.execute()
        if old:
            self._drop_chunks(key, old)
        return size

    def put_bytes(self, key: str, data: bytes) -> int:
        return self.put(key, io.BytesIO(data))

    def _layout(self, key: str) -> tuple[int, int, str]:
        raw = self.client.hgetall(self._manifest(key))
        if not raw:
            raise BlobMissing(key, self.describe(), self.replica)
        fields = decode(raw)
        return int(fields["size"]), int(fields["chunk"]), fields["gen"]

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        size, chunk, gen = self._layout(key)
        return self._read(key, size, chunk, gen, offset, length)

    def _read(self, key: str, size: int, chunk: int, gen: str, offset: int, length: int
              ) -> bytes:
        end = min(size, offset + length)
        if offset >= end:
            return b""
        pipe = self.client.pipeline(transaction=False)
        for n in range(offset // chunk, (end - 1) // chunk + 1):
            start = max(offset - n * chunk, 0)
            pipe.getrange(self._chunk(key, gen, n), start, min(end - n * chunk, chunk) - 1)
        parts = pipe.execute()
        data = b"".join(parts)
        if len(data) != end - offset:   # deleted between the manifest and the chunks
            raise BlobMissing(key, self.describe(), self.replica)
        return data

    def open(self, key: str) -> BinaryIO:
        size, chunk, gen = self._layout(key)
        return io.BufferedReader(_ChunkReader(self, key, size, chunk, gen), chunk)  # type: ignore[return-value]

    def delete(self, key: str) -> None:
        manifest = self._manifest(key)
        raw = self.client.hgetall(manifest)
        self.client.delete(manifest)
        if raw:
            self._drop_chunks(key, raw)

    def _drop_chunks(self, key: str, raw: dict[Any, Any]) -> None:
        fields = decode(raw)
        count = int(fields.get("chunks") or 0)
        names = [self._chunk(key, fields["gen"], n) for n in range(count)]
        for start in range(0, len(names), 256):
            # One slot (the hash tag), so a multi-key DEL is fine on a cluster.
            self.client.delete(*names[start:start + 256])


class _ChunkReader(io.RawIOBase):
    """A blob read front to back, a chunk (or what ``readinto`` asks) per round trip."""

    def __init__(self, store: RedisBlobStore, key: str, size: int, chunk: int, gen: str
                 ) -> None:
        self._store, self._key, self._size, self._chunk, self._gen = store, key, size, chunk, gen
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._size - self._pos, self._chunk)
        if want <= 0:
            return 0
        data = self._store._read(self._key, self._size, self._chunk, self._gen, self._pos, want)
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)
