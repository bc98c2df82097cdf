"""The batch package against the shared real Redis, with a deterministic run_line."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

from batch.records import LineRun, Owner
from batch.worker import LineAnswer
from tests.batch.system import OWNER, chat_line, echo_line, make_system


def test_every_line_once_and_failures_in_the_error_file(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        system = make_system(prefix, tmp_path)
        try:
            system.start_worker()
            system.start_worker()
            lines = [chat_line(f"r{i}", "bad" if i % 10 == 0 else f"c{i}") for i in range(120)]
            batch_id = await system.submit(lines)
            batch = await system.wait_status(batch_id, {"completed"})
            assert batch["request_counts"] == {"total": 120, "completed": 108, "failed": 12}
            assert batch["usage"]["input_tokens"] == 108 * 3
            assert batch["metadata"] == {"k": "v"}
            for stamp in ("created_at", "in_progress_at", "finalizing_at", "completed_at"):
                assert batch[stamp] is not None
            output = system.content(batch["output_file_id"])
            errors = system.content(batch["error_file_id"])
            assert [r["custom_id"] for r in output] == [f"r{i}" for i in range(120) if i % 10]
            assert {r["response"]["status_code"] for r in errors} == {400}
            assert Counter(r["custom_id"] for r in output + errors) == {f"r{i}": 1
                                                                       for i in range(120)}
            # ``completed`` is written before the batch is retired (its input file let
            # go, then the active set left), so the status can be seen a moment first.
            deadline = time.monotonic() + 5
            while await system.batches.active_ids() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert await system.batches.active_ids() == []
        finally:
            await system.aclose()

    asyncio.run(main())


def test_a_dead_workers_lines_are_taken_over(prefix: str, tmp_path: Path) -> None:
    """A worker that stops mid-line (no ack, no record) loses nothing, duplicates nothing."""
    calls: Counter[str] = Counter()

    async def hang(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        calls[run.id] += 1
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def counted(owner: Owner, url: str, body: dict[str, Any], run: LineRun
                      ) -> LineAnswer:
        calls[run.id] += 1
        return await echo_line(owner, url, body, run)

    async def main() -> None:
        system = make_system(prefix, tmp_path, concurrency=4)
        try:
            dead = system.start_worker(hang, name="dead")
            batch_id = await system.submit([chat_line(f"r{i}") for i in range(40)])
            while len(calls) < 4:
                await asyncio.sleep(0.02)
            # Simulate a crash: its loops stop (no heartbeat), its lines stay pending.
            for task in dead._loops:
                task.cancel()
            system.start_worker(counted, name="live")
            batch = await system.wait_status(batch_id, {"completed"})
            assert batch["request_counts"] == {"total": 40, "completed": 40, "failed": 0}
            output = system.content(batch["output_file_id"])
            assert Counter(r["custom_id"] for r in output) == {f"r{i}": 1 for i in range(40)}
        finally:
            await system.aclose()

    asyncio.run(main())


def test_cancel_stops_new_lines_and_keeps_what_completed(prefix: str, tmp_path: Path) -> None:
    async def slow(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        await asyncio.sleep(0.05)
        return await echo_line(owner, url, body, run)

    async def main() -> None:
        system = make_system(prefix, tmp_path, concurrency=2)
        try:
            system.start_worker(slow)
            batch_id = await system.submit([chat_line(f"r{i}") for i in range(200)])
            await asyncio.sleep(0.5)
            cancelling = await system.batches.cancel(OWNER, batch_id, time.time())
            assert cancelling is not None and cancelling["status"] == "cancelling"
            batch = await system.wait_status(batch_id, {"cancelled"})
            done = batch["request_counts"]["completed"]
            assert 0 < done < 200 and batch["cancelled_at"] is not None
            output = system.content(batch["output_file_id"])
            unrun = system.content(batch["error_file_id"])
            assert len(output) == done
            assert {r["error"]["code"] for r in unrun} == {"batch_cancelled"}
            assert len(output) + len(unrun) == 200
        finally:
            await system.aclose()

    asyncio.run(main())


def test_expiry_writes_unrun_lines_as_batch_expired(prefix: str, tmp_path: Path) -> None:
    async def slow(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        await asyncio.sleep(0.05)
        return await echo_line(owner, url, body, run)

    async def main() -> None:
        system = make_system(prefix, tmp_path, concurrency=2)
        try:
            system.start_worker(slow)
            batch_id = await system.submit([chat_line(f"r{i}") for i in range(300)],
                                           window="3s", window_s=3)  # ~120 of 300 run: room under load
            batch = await system.wait_status(batch_id, {"expired"})
            output = system.content(batch["output_file_id"])
            unrun = system.content(batch["error_file_id"])
            assert 0 < len(output) < 300 and batch["expired_at"] is not None
            assert {r["error"]["code"] for r in unrun} == {"batch_expired"}
            assert sorted(r["custom_id"] for r in output + unrun) == sorted(
                f"r{i}" for i in range(300))
        finally:
            await system.aclose()

    asyncio.run(main())


def test_another_team_sees_nothing(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        system = make_system(prefix, tmp_path)
        stranger = Owner("team-b", "sha256:" + "b" * 64)
        try:
            batch_id = await system.submit([chat_line("r0")])
            batch = await system.batches.get(OWNER, batch_id)
            for call in (system.batches.get(stranger, batch_id),
                         system.files.get(stranger, batch["input_file_id"]),
                         system.batches.cancel(stranger, batch_id, 0)):
                try:
                    await call
                except Exception as exc:
                    assert getattr(exc, "status_code", None) == 404
                else:
                    raise AssertionError("a stranger saw the batch")
            assert (await system.batches.list_page(stranger, after=None, limit=10))["data"] == []
        finally:
            await system.aclose()

    asyncio.run(main())


def test_transient_refusals_are_retried_but_quota_is_final(prefix: str, tmp_path: Path) -> None:
    seen: Counter[str] = Counter()

    async def flaky(owner: Owner, url: str, body: dict[str, Any], run: LineRun
                    ) -> LineAnswer:
        seen[run.id] += 1
        content = body["messages"][0]["content"]
        if content == "quota":
            return LineAnswer(429, {"error": {"code": "insufficient_quota", "message": "no"}})
        if seen[run.id] <= 2:
            return LineAnswer(503, {"error": {"code": "service_unavailable", "message": "later"}})
        return await echo_line(owner, url, body, run)

    async def main() -> None:
        system = make_system(prefix, tmp_path, retry_backoff_s=0.01)
        try:
            system.start_worker(flaky)
            batch_id = await system.submit([chat_line("a"), chat_line("q", "quota")])
            batch = await system.wait_status(batch_id, {"completed"})
            assert batch["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
            assert sorted(seen.values()) == [1, 3]  # quota once; 503, 503, then 200
        finally:
            await system.aclose()

    asyncio.run(main())
