"""Rate-limited lines wait their retry-after instead of failing, until cancel or expiry."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from batch.records import LineRun, Owner
from batch.worker import LineAnswer, rate_wait_s
from tests.batch.system import OWNER, chat_line, echo_line, make_system


def refused(retry_after: str, code: str = "rate_limit_exceeded") -> LineAnswer:
    return LineAnswer(429, {"error": {"message": "slow down", "type": "rate_limit_error",
                                      "param": None, "code": code}},
                      {"retry-after": retry_after})


def test_rate_limited_lines_are_paced_without_using_line_retries(prefix: str, tmp_path: Path
                                                                  ) -> None:
    calls: dict[str, list[float]] = defaultdict(list)

    async def limited(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        calls[run.id].append(time.monotonic())
        if len(calls[run.id]) <= 3:
            return refused("0.2")
        return await echo_line(owner, url, body, run)

    async def main() -> None:
        system = make_system(prefix, tmp_path, line_retries=0, concurrency=4)
        try:
            system.start_worker(limited)
            batch_id = await system.submit([chat_line(f"r{i}") for i in range(6)])
            batch = await system.wait_status(batch_id, {"completed"})
            assert batch["request_counts"] == {"total": 6, "completed": 6, "failed": 0}
            assert sorted(len(times) for times in calls.values()) == [4] * 6
            gaps = [b - a for times in calls.values() for a, b in itertools.pairwise(times)]
            assert min(gaps) >= 0.2  # each waited its retry-after
        finally:
            await system.aclose()

    asyncio.run(main())


def test_a_cancel_ends_the_wait_and_lists_the_lines_as_cancelled(prefix: str, tmp_path: Path
                                                                  ) -> None:
    async def always_limited(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        return refused("30")

    async def main() -> None:
        # A long drain grace: the batch ends promptly only if waiting lines give up.
        system = make_system(prefix, tmp_path, concurrency=3, drain_grace_s=30)
        try:
            system.start_worker(always_limited)
            batch_id = await system.submit([chat_line(f"r{i}") for i in range(6)])
            await asyncio.sleep(0.5)
            assert await system.batches.cancel(OWNER, batch_id, time.time()) is not None
            started = time.monotonic()
            batch = await system.wait_status(batch_id, {"cancelled"}, timeout=10)
            assert time.monotonic() - started < 5
            assert batch["request_counts"] == {"total": 6, "completed": 0, "failed": 0}
            errors = system.content(batch["error_file_id"])
            assert sorted(e["custom_id"] for e in errors) == [f"r{i}" for i in range(6)]
            assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
        finally:
            await system.aclose()

    asyncio.run(main())


def test_the_completion_window_ends_the_wait(prefix: str, tmp_path: Path) -> None:
    async def always_limited(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        return refused("30")

    async def main() -> None:
        system = make_system(prefix, tmp_path, concurrency=2, drain_grace_s=30)
        try:
            system.start_worker(always_limited)
            batch_id = await system.submit([chat_line(f"r{i}") for i in range(4)], window="1s",
                                           window_s=1)
            batch = await system.wait_status(batch_id, {"expired"}, timeout=10)
            errors = system.content(batch["error_file_id"])
            assert {e["error"]["code"] for e in errors} == {"batch_expired"}
            assert len(errors) == 4
        finally:
            await system.aclose()

    asyncio.run(main())


def test_a_wait_follows_retry_after_within_bounds() -> None:
    assert 60.0 <= rate_wait_s({"retry-after": "3600"}, 1.0) <= 66.0
    assert 2.0 <= rate_wait_s({"retry-after": "2"}, 1.0) <= 2.5
    assert 1.0 <= rate_wait_s({}, 1.0) <= 1.5
    assert 1.0 <= rate_wait_s({"retry-after": "soon"}, 1.0) <= 1.5
