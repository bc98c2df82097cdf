"""Append-only local journal of spends that could not reach Redis.

    journal = SpendJournal(Path(".routegate/budget-journal"), replica_id="gw-1")
    await journal.append(entry)          # one fsync'd JSON line
    await journal.replay(apply_settle)   # later, when Redis answers again

Each replica appends to ``<dir>/<replica_id>.jsonl``. Replay claims a file by
renaming it to ``*.replaying`` (atomic, so a new spend after the claim goes
to a fresh file) and deletes it only once every line was applied. Applying
is the settle script, idempotent by request id, so a replay cut short by a
new outage, two replicas replaying the same orphaned file, or a settle that
reached Redis but lost its reply, never bill twice. Any replica replays all
files of the directory, so a crashed replica's journal is not lost.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_CLAIMED = ".replaying"


# The model of an entry that only releases a hold: a reserve whose reply was
# lost, for a request that was then refused. Nothing is billed or counted.
RELEASE_ONLY = ""


@dataclass(frozen=True)
class JournalEntry:
    """One settled request: everything the settle script needs, nothing more."""

    request_id: str
    team: str
    key_id: str | None
    model: str
    day: str
    month: str
    minute: int
    input_tokens: int
    output_tokens: int
    cost_nanousd: int

    def to_line(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> JournalEntry:
        return cls(**json.loads(line))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0  # claimed by a replay between listing and stat


class SpendJournal:
    def __init__(self, directory: Path, replica_id: str) -> None:
        self.directory = directory
        self._path = directory / f"{replica_id}.jsonl"
        self._lock = threading.Lock()

    async def append(self, entry: JournalEntry) -> None:
        # fsync blocks for milliseconds: keep it off the event loop.
        await asyncio.to_thread(self._append_sync, entry.to_line())

    def _append_sync(self, line: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            while True:
                fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    # A replay may have claimed (renamed) the file between our
                    # open and our lock: then write to a fresh file instead.
                    if not self._still_current(fd):
                        continue
                    os.write(fd, line)
                    os.fsync(fd)
                    return
                finally:
                    os.close(fd)

    def _still_current(self, fd: int) -> bool:
        try:
            return os.stat(self._path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def pending(self) -> bool:
        """Whether any journal file (of any replica) waits to be replayed."""
        return any(_size(p) > 0 for p in self._files())

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(
            p for p in self.directory.iterdir() if p.suffix == ".jsonl" or p.name.endswith(_CLAIMED)
        )

    async def replay(self, apply: Callable[[JournalEntry], Awaitable[None]]) -> int:
        """Apply every journalled entry; return how many were applied.

        An exception from ``apply`` (Redis gone again) stops the replay and
        propagates; the claimed file stays and is replayed from its start
        next time.
        """
        applied = 0
        for path in self._files():
            claimed = await asyncio.to_thread(self._claim, path)
            if claimed is None:
                continue
            for entry in await asyncio.to_thread(self._read, claimed):
                await apply(entry)
                applied += 1
            claimed.unlink(missing_ok=True)
        return applied

    def _claim(self, path: Path) -> Path | None:
        if path.name.endswith(_CLAIMED):
            return path
        claimed = path.with_name(f"{path.stem}.{uuid.uuid4().hex[:8]}{_CLAIMED}")
        try:
            path.rename(claimed)
        except FileNotFoundError:
            return None  # another replica claimed it first
        return claimed

    @staticmethod
    def _read(path: Path) -> list[JournalEntry]:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            # Wait for a writer that locked the file before it was renamed.
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "rb") as fh:
                raw = fh.read()
        finally:
            os.close(fd)
        entries = []
        for line in raw.splitlines():
            try:
                entries.append(JournalEntry.from_line(line))
            except (ValueError, TypeError):
                # Only a crash in the middle of a write tears a line; its
                # spend cannot be recovered, so say so loudly.
                log.error("budget journal %s: skipping unreadable line %r", path, line[:80])
        return entries
