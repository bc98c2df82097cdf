"""Where file bytes live: a small blob-store interface and its directory implementation.

    blobs = DirectoryBlobStore(Path(".routegate/files"))
    size = blobs.put("file-ab12...", upload_fileobj)
    with blobs.open("file-ab12...") as f: ...
    blobs.read_range("file-ab12...", offset=120, length=88)

The methods are synchronous (plain file I/O, or a synchronous client);
async callers run them with ``asyncio.to_thread``. Every replica that serves
a batch reads its input lines from here, so replicas on several hosts need a
store they all reach: ``RedisBlobStore`` (``blob_redis.py``) or
``S3BlobStore`` (``blob_s3.py``). A directory serves one host (or a shared
mount); ``blob_probe.py`` finds out when it does not.

A blob that is not there raises ``BlobMissing``, which names the store and
the replica: with the bytes held by the file store for as long as a batch
reads them, a missing blob is a store that this replica does not share, or
lost data, never a file the user deleted.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Protocol

_KEY = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
COPY_CHUNK = 1024 * 1024


class BlobMissing(Exception):
    """The blob is not in the store this replica reads."""

    def __init__(self, key: str, store: str, replica: str) -> None:
        self.key, self.store, self.replica = key, store, replica
        where = f" on replica {replica}" if replica else ""
        super().__init__(f"The bytes of {key} are not in {store}{where}.")


def check_key(key: str) -> str:
    # Keys are our own random ids, but a path or a Redis key is never built
    # from an unchecked string.
    if not _KEY.match(key):
        raise ValueError(f"invalid blob key {key!r}")
    return key


class BlobStore(Protocol):
    def describe(self) -> str: ...
    def put(self, key: str, src: BinaryIO) -> int: ...
    def put_bytes(self, key: str, data: bytes) -> int: ...
    def open(self, key: str) -> BinaryIO: ...
    def read_range(self, key: str, offset: int, length: int) -> bytes: ...
    def delete(self, key: str) -> None: ...


class DirectoryBlobStore:
    """One file per blob under ``root``; writes land whole or not at all."""

    def __init__(self, root: Path, *, replica: str = "") -> None:
        self.root = root
        self.replica = replica

    def describe(self) -> str:
        return f"the local blob store {self.root.resolve()}"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _missing(self, key: str) -> BlobMissing:
        return BlobMissing(key, self.describe(), self.replica)

    def put(self, key: str, src: BinaryIO) -> int:
        """Copy ``src`` (from its current position) into the blob; returns its size."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, COPY_CHUNK)
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
            # A rename is atomic: a reader never sees half a file.
            os.replace(tmp, self._path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return size

    def put_bytes(self, key: str, data: bytes) -> int:
        import io

        return self.put(key, io.BytesIO(data))

    def open(self, key: str) -> BinaryIO:
        """The blob for reading; raises BlobMissing when it is not here."""
        try:
            return open(self._path(key), "rb")
        except FileNotFoundError:
            raise self._missing(key) from None

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        with self.open(key) as f:
            f.seek(offset)
            return f.read(length)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


class ReadThroughBlobStore:
    """Writes to ``primary``; reads fall back to ``legacy`` for blobs written
    before the switch (a gateway that moved from ``local`` to ``redis``), so that
    files uploaded before an upgrade stay readable until they expire."""

    def __init__(self, primary: BlobStore, legacy: BlobStore) -> None:
        self.primary, self.legacy = primary, legacy

    def describe(self) -> str:
        return f"{self.primary.describe()} (and, for older files, {self.legacy.describe()})"

    def put(self, key: str, src: BinaryIO) -> int:
        return self.primary.put(key, src)

    def put_bytes(self, key: str, data: bytes) -> int:
        return self.primary.put_bytes(key, data)

    def open(self, key: str) -> BinaryIO:
        try:
            return self.primary.open(key)
        except BlobMissing:
            return self.legacy.open(key)

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        try:
            return self.primary.read_range(key, offset, length)
        except BlobMissing:
            return self.legacy.read_range(key, offset, length)

    def delete(self, key: str) -> None:
        self.primary.delete(key)
        self.legacy.delete(key)
