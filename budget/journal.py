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

An entry that can never apply (a WRONGTYPE reply, a Lua error, a torn line)
is appended to ``<dir>/quarantine`` as its raw line, logged and counted in
``routegate_budget_journal_quarantined_total``, and the replay goes on: one
bad entry must not keep Redis marked down (a fail_closed replica would answer
503 until someone deleted the file). After fixing the cause, append the
quarantined lines to any ``*.jsonl`` file of the directory to replay them.
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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from prometheus_client import Counter

log = logging.getLogger(__name__)

_CLAIMED = ".replaying"
# No .jsonl suffix: the replay must never pick its own quarantine up again.
QUARANTINE = "quarantine"

# On prometheus_client's default registry: the journal has no telemetry of its
# own, and in multi-worker mode the value is summed from the workers' files.
QUARANTINED_METRIC = "routegate_budget_journal_quarantined_total"
QUARANTINED = Counter(QUARANTINED_METRIC.removesuffix("_total"),
                      "Journalled spends set aside because they can never be replayed")


# The model of an entry that only releases a hold: a reserve whose reply was
# lost, for a request that was then refused. Nothing is billed or counted.
RELEASE_ONLY = ""


@dataclass(slots=True)   # built per settle: a frozen init costs a setattr per field
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
    # The id names work that may run again (a batch line): it stays settled for
    # budget.stable_id_ttl_s, whatever day it runs on (older lines lack it).
    stable: bool = False
    # A stable id's run order (a batch line's generation; lines of versions before
    # it: the wall clock, ms): a later run's bill replaces an earlier one, never the
    # reverse (0: older lines, which replace nothing).
    at_ms: int = 0
    # Of input_tokens, those read from a prompt cache, and those written to it
    # (0: older lines).
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def to_line(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> JournalEntry:
        """A journalled entry; fields this version does not know (a newer replica wrote
        the line) are left out, so a fleet mid-upgrade, or rolled back, bills it still."""
        data = json.loads(line)
        if isinstance(data, dict) and not data.keys() <= _FIELDS:
            data = {k: v for k, v in data.items() if k in _FIELDS}
        return cls(**data)


_FIELDS = frozenset(f.name for f in fields(JournalEntry))


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

    async def replay(self, apply: Callable[[JournalEntry], Awaitable[None]],
                     permanent: Callable[[BaseException], bool] = lambda exc: False) -> int:
        """Apply every journalled entry; return how many were applied.

        An exception from ``apply`` for which ``permanent`` is true sends
        that entry to the quarantine. Any other (Redis gone again) stops the
        replay and propagates; the claimed file stays and is replayed from its
        start next time.
        """
        applied = 0
        for path in self._files():
            claimed = await asyncio.to_thread(self._claim, path)
            if claimed is None:
                continue
            for line, entry in await asyncio.to_thread(self._read, claimed):
                if entry is None:
                    # Only a crash in the middle of a write tears a line.
                    await self._quarantine(line, claimed, "unreadable line")
                    continue
                try:
                    await apply(entry)
                except Exception as exc:
                    if not permanent(exc):
                        raise
                    await self._quarantine(line, claimed, repr(exc))
                    continue
                applied += 1
            claimed.unlink(missing_ok=True)
        return applied

    @property
    def quarantine_path(self) -> Path:
        return self.directory / QUARANTINE

    async def _quarantine(self, line: bytes, source: Path, reason: str) -> None:
        # Fsync'd before the claimed file is deleted: the line is never lost.
        # A replay cut short after this re-quarantines it; a duplicate line
        # there is harmless, since settles are idempotent by request id.
        await asyncio.to_thread(self._append_quarantine, line.rstrip(b"\n") + b"\n")
        QUARANTINED.inc()
        log.error("budget journal %s: quarantined an entry that cannot be replayed (%s) "
                  "into %s: %r", source, reason, self.quarantine_path, line[:200])

    def _append_quarantine(self, line: bytes) -> None:
        fd = os.open(self.quarantine_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # two replicas may quarantine at once
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

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
    def _read(path: Path) -> list[tuple[bytes, JournalEntry | None]]:
        """Each line with its entry, or None for a line that does not decode."""
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
        entries: list[tuple[bytes, JournalEntry | None]] = []
        for line in raw.splitlines():
            if not line.strip():
                continue
            try:
                entries.append((line, JournalEntry.from_line(line)))
            except (ValueError, TypeError):
                entries.append((line, None))
        return entries
