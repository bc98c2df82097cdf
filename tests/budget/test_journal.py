"""The local journal and the fail-open allowance, without Redis."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from budget.failopen import LocalAllowance
from budget.journal import JournalEntry, SpendJournal


def _entry(i: int) -> JournalEntry:
    return JournalEntry(f"req-{i}", "t", None, "m", "2026-11-29", "2026-11", 1, 1, 2, i)


def test_no_line_is_lost_when_replays_race_with_writers(tmp_path: Path) -> None:
    """Two replicas append while a third keeps claiming and replaying their files."""
    writers = [SpendJournal(tmp_path, f"w{n}") for n in range(2)]
    reader = SpendJournal(tmp_path, "reader")
    applied: list[str] = []
    done = threading.Event()

    def write(journal: SpendJournal, offset: int) -> None:
        for i in range(offset, offset + 150):
            journal._append_sync(_entry(i).to_line())

    async def apply(entry: JournalEntry) -> None:
        applied.append(entry.request_id)

    async def replay_until_done() -> None:
        while not done.is_set() or reader.pending():
            await reader.replay(apply)
            await asyncio.sleep(0.001)

    threads = [threading.Thread(target=write, args=(w, n * 1000)) for n, w in enumerate(writers)]
    for t in threads:
        t.start()

    async def main() -> None:
        task = asyncio.create_task(replay_until_done())
        for t in threads:
            await asyncio.to_thread(t.join)
        done.set()
        await task

    asyncio.run(main())
    assert sorted(applied) == sorted({f"req-{i}" for i in [*range(150), *range(1000, 1150)]})
    assert not reader.pending()


def test_a_failed_replay_keeps_the_file_and_torn_lines_are_quarantined(tmp_path: Path) -> None:
    journal = SpendJournal(tmp_path, "r1")
    calls: list[str] = []

    async def flaky(entry: JournalEntry) -> None:
        calls.append(entry.request_id)
        if len(calls) == 2:
            raise ConnectionError("Redis went away again")

    async def main() -> None:
        for i in range(3):
            await journal.append(_entry(i))
        with open(tmp_path / "r1.jsonl", "ab") as fh:
            fh.write(b'{"request_id": "torn')  # a crash mid-write
        try:
            await journal.replay(flaky)
        except ConnectionError:
            pass
        assert journal.pending()
        assert await journal.replay(flaky) == 3  # replayed from the start: idempotent apply
        assert not journal.pending()

    asyncio.run(main())
    assert calls == ["req-0", "req-1", "req-0", "req-1", "req-2"]
    assert (tmp_path / "quarantine").read_bytes() == b'{"request_id": "torn\n'


def test_only_permanent_failures_are_quarantined(tmp_path: Path) -> None:
    journal = SpendJournal(tmp_path, "r1")

    async def refuse(entry: JournalEntry) -> None:
        raise (ValueError if entry.request_id == "req-0" else ConnectionError)(entry.request_id)

    async def main() -> None:
        for i in range(2):
            await journal.append(_entry(i))
        try:
            await journal.replay(refuse, permanent=lambda exc: isinstance(exc, ValueError))
        except ConnectionError:
            pass
        assert journal.pending()  # the transient failure keeps its entry for a retry

    asyncio.run(main())
    assert [JournalEntry.from_line(x) for x in (tmp_path / "quarantine").read_bytes().splitlines()
            ] == [_entry(0)]


def test_local_allowance_caps_spend_and_rate_per_team() -> None:
    allowance = LocalAllowance(cap_nanousd=100, rpm=3)
    assert allowance.admit("a", 60, minute=1, ceiling=None) is None
    assert allowance.admit("a", 60, minute=1, ceiling=None) == "fail_open"
    assert allowance.admit("b", 60, minute=1, ceiling=50) == "fail_open"  # last known budget
    allowance.settle("a", 60, cost=10)
    assert allowance.committed("a") == 10
    assert allowance.admit("a", 60, minute=1, ceiling=None) is None
    assert allowance.admit("a", 0, minute=1, ceiling=None) is None  # third request
    assert allowance.admit("a", 0, minute=1, ceiling=None) == "rpm"
    assert allowance.admit("a", 0, minute=2, ceiling=None) is None
    allowance.forget_spent()
    assert allowance.committed("a") == 60  # the in-flight reservation still counts


def test_a_line_a_newer_replica_wrote_is_replayed_without_its_new_fields(tmp_path: Path) -> None:
    """Replicas that share a data_dir replay each other's journals: a line with a field
    this version does not know (written by a newer one, or before a rollback) is billed,
    not quarantined as unreadable."""
    line = _entry(7).to_line().rstrip(b"}\n") + b',"tokens_in_a_later_version":5}\n'
    assert JournalEntry.from_line(line) == _entry(7)
    journal = SpendJournal(tmp_path, "old")
    journal._append_sync(line)
    applied: list[JournalEntry] = []

    async def apply(entry: JournalEntry) -> None:
        applied.append(entry)

    asyncio.run(SpendJournal(tmp_path, "reader").replay(apply))
    assert applied == [_entry(7)]
