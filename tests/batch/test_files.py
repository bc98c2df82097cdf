"""File storage against the shared real Redis: the team quota, expiry, and held files."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import pytest

from batch.files import FileStore
from batch.retention import HELD_RECHECK_S
from core.errors import InvalidRequest, NotFound
from tests.batch.system import OWNER, System, chat_line, make_system


async def used(system: System) -> tuple[int, int]:
    raw = await system.redis.hmget(system.files.keys.storage(OWNER.team), "used", "reserved")
    return int(raw[0] or 0), int(raw[1] or 0)


async def store(files: FileStore, data: bytes, **kw: object) -> dict[str, str]:
    return await files.create(OWNER, "f.jsonl", "batch", io.BytesIO(data), lines=1, **kw)  # type: ignore[arg-type]


def test_concurrent_creates_share_the_headroom_exactly(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        system = make_system(prefix, tmp_path, team_storage_bytes=10_000)
        try:
            outcomes = await asyncio.gather(*(store(system.files, b"x" * 3000) for _ in range(10)),
                                            return_exceptions=True)
            stored = [o for o in outcomes if isinstance(o, dict)]
            refused = [o for o in outcomes if isinstance(o, InvalidRequest)]
            assert (len(stored), len(refused)) == (3, 7)
            assert {r.code for r in refused} == {"storage_quota_exceeded"}
            assert await used(system) == (9000, 0)
            assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f["id"] for f in stored)
        finally:
            await system.aclose()

    asyncio.run(main())


def test_a_reservation_whose_replica_died_lapses(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        system = make_system(prefix, tmp_path, team_storage_bytes=10_000)
        files = system.files
        try:
            keys = [files.keys.storage(OWNER.team), files.keys.reservations(OWNER.team)]
            now = time.time()
            held, _ = await files._reserve(keys=keys, args=[now, now + 0.3, "file-dead:8000",
                                                             8000, files.quota_bytes])
            assert held == 1
            with pytest.raises(InvalidRequest):
                await store(files, b"x" * 3000)
            await asyncio.sleep(0.4)
            await store(files, b"x" * 3000)
            assert await used(system) == (3000, 0)
        finally:
            await system.aclose()

    asyncio.run(main())


def test_expiry_removes_files_a_bounded_number_per_sweep(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        system = make_system(prefix, tmp_path, file_expiry_s=1)
        files = system.files
        try:
            soon = [await store(files, b"x" * 100) for _ in range(5)]
            kept = await store(files, b"y" * 50, expires_after_s=3600)
            assert int(kept["expires_at"]) == int(kept["created_at"]) + 3600
            await asyncio.sleep(1.1)
            for f in soon:  # out of view once expired, before any sweep
                with pytest.raises(NotFound):
                    await files.get(OWNER, f["id"])
            later = time.time() + 5
            assert await files.retention.sweep(later, limit=2) == 2
            assert await used(system) == (350, 0)
            assert await files.retention.sweep(later, limit=10) == 3
            assert await used(system) == (50, 0)
            assert [p.name for p in tmp_path.iterdir()] == [kept["id"]]
            assert [f["id"] for f in (await files.list_page(
                OWNER, purpose=None, limit=10, order="desc", after=None))["data"]] == [kept["id"]]
        finally:
            await system.aclose()

    asyncio.run(main())


def test_a_held_file_outlives_its_delete_until_released(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        system = make_system(prefix, tmp_path)
        files, retention = system.files, system.files.retention
        try:
            f = await store(files, b"x" * 100)
            batch_id = await system.submit([chat_line("r0")])  # a real batch, no worker: held
            batch = await system.batches.get(OWNER, batch_id)
            held = await files.fields(OWNER, batch["input_file_id"])
            await files.delete(OWNER, held["id"])
            await files.delete(OWNER, f["id"])
            with pytest.raises(NotFound):
                await files.get(OWNER, held["id"])
            assert (tmp_path / held["id"]).exists() and not (tmp_path / f["id"]).exists()
            assert not await retention.hold(OWNER.team, held["id"], "batch_new", time.time())
            await retention.sweep(time.time() + HELD_RECHECK_S + 1, limit=10)
            assert (tmp_path / held["id"]).exists()  # its batch is still running
            await retention.release(OWNER.team, held["id"], batch_id)
            assert not (tmp_path / held["id"]).exists()
            assert await used(system) == (0, 0)
        finally:
            await system.aclose()

    asyncio.run(main())


def test_a_holder_that_vanished_does_not_keep_a_file_forever(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        system = make_system(prefix, tmp_path)
        files, retention = system.files, system.files.retention
        try:
            f = await store(files, b"x" * 100)
            assert await retention.hold(OWNER.team, f["id"], "batch_never_written", time.time())
            await files.delete(OWNER, f["id"])
            assert (tmp_path / f["id"]).exists()
            assert await retention.sweep(time.time(), limit=10) == 0  # looked at again later
            assert await retention.sweep(time.time() + HELD_RECHECK_S + 1, limit=10) == 1
            assert not (tmp_path / f["id"]).exists()
            assert await used(system) == (0, 0)
        finally:
            await system.aclose()

    asyncio.run(main())
