"""Where file bytes live: a small blob-store interface and its directory implementation.

    blobs = DirectoryBlobStore(Path(".routegate/files"))
    size = blobs.put("file-ab12...", upload_fileobj)
    with blobs.open("file-ab12...") as f: ...
    blobs.read_range("file-ab12...", offset=120, length=88)

The methods are synchronous (plain file I/O); async callers run them with
``asyncio.to_thread``. Every replica that serves a batch reads its input
lines from here, so replicas on several hosts need a shared directory, or
another ``BlobStore`` (an object store's ranged GET maps onto ``read_range``).
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


class BlobStore(Protocol):
    def put(self, key: str, src: BinaryIO) -> int: ...
    def put_bytes(self, key: str, data: bytes) -> int: ...
    def open(self, key: str) -> BinaryIO: ...
    def read_range(self, key: str, offset: int, length: int) -> bytes: ...
    def delete(self, key: str) -> None: ...


class DirectoryBlobStore:
    """One file per blob under ``root``; writes land whole or not at all."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        # Keys are our own random ids, but a path is never built from an
        # unchecked string.
        if not _KEY.match(key):
            raise ValueError(f"invalid blob key {key!r}")
        return self.root / key

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
        """The blob for reading; raises FileNotFoundError when it is gone."""
        return open(self._path(key), "rb")

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        with open(self._path(key), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)
