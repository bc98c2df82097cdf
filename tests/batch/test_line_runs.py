"""A line's runs are numbered as they start, and only the last-started may record it.

A stalled worker's run that answers after another worker took its line over
used to record first (and its answer stood, while the bill was the later
run's). Now its record is refused and its entry left pending: if the run that
took over dies too, a third takes the line, and nothing is lost.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from batch.records import LineRun, Owner
from batch.worker import LineAnswer, RunLine
from tests.batch.system import OWNER, chat_line, make_system


def _answer(run: LineRun) -> LineAnswer:
    return LineAnswer(200, {"id": run.id, "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": f"run {run.generation}"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": run.generation,
                  "total_tokens": 3 + run.generation}})


async def _until(check: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _answers_once(resume: asyncio.Event, runs: list[LineRun]) -> RunLine:
    """A run that stalls (its worker frozen) until ``resume``, then answers well."""
    async def stalls(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        runs.append(run)
        await resume.wait()
        return _answer(run)
    return stalls


def test_a_stalled_runs_late_answer_is_not_recorded_and_its_line_not_lost(
        prefix: str, tmp_path: Path) -> None:
    runs: list[LineRun] = []
    resume_first = asyncio.Event()
    stalls = _answers_once(resume_first, runs)

    async def hangs(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        runs.append(run)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def answers(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        runs.append(run)
        return _answer(run)

    async def main() -> None:
        system = make_system(prefix, tmp_path)
        try:
            first = system.start_worker(stalls, name="first")
            batch_id = await system.submit([chat_line("only")])
            await _until(lambda: len(runs) == 1)
            for task in first._loops:       # frozen: no heartbeat, its run still going
                task.cancel()
            second = system.start_worker(hangs, name="second")
            await _until(lambda: len(runs) == 2)       # took the line over after claim_idle_s
            for task in second._loops:      # and dies mid-answer
                task.cancel()
            resume_first.set()              # the first run answers now, after both started
            await _until(lambda: not first._running)
            batch = await system.batches.get(OWNER, batch_id)
            assert batch["request_counts"]["completed"] == 0      # refused: a later run began
            system.start_worker(answers, name="third")
            batch = await system.wait_status(batch_id, {"completed"})
            output = system.content(batch["output_file_id"])
            assert [run.generation for run in runs] == [1, 2, 3]
            assert len({run.id for run in runs}) == 1                 # one stable id
            assert [line["response"]["body"]["choices"][0]["message"]["content"]
                    for line in output] == ["run 3"]
            assert batch["request_counts"] == {"total": 1, "completed": 1, "failed": 0}
        finally:
            await system.aclose()

    asyncio.run(main())


def _stall_then_takeover(prefix: str, tmp_path: Path, later: Any,
                         after: Any = None, **settings: Any) -> tuple[dict, list, list]:
    """Run 1 stalls and is taken over by run 2 (``later``); run 1 then answers well,
    refused. ``after(system, batch_id)`` runs once run 1 is done. Returns the batch,
    its output and its error lines."""
    runs: list[LineRun] = []
    resume_first, first_refused = asyncio.Event(), asyncio.Event()
    stalls = _answers_once(resume_first, runs)

    async def second(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        runs.append(run)
        await first_refused.wait()          # answers only once run 1's record was refused
        return await later(run)

    async def main() -> tuple[dict, list, list]:
        system = make_system(prefix, tmp_path, **settings)
        try:
            first = system.start_worker(stalls, name="first")
            batch_id = await system.submit([chat_line("only")])
            await _until(lambda: len(runs) == 1)
            for task in first._loops:
                task.cancel()
            system.start_worker(second, name="second")
            await _until(lambda: len(runs) >= 2)
            resume_first.set()
            await _until(lambda: not first._running)
            first_refused.set()
            if after is not None:
                await after(system, batch_id)
            batch = await system.wait_status(batch_id, {"completed", "cancelled"})
            return (batch, system.content(batch["output_file_id"]),
                    system.content(batch["error_file_id"]))
        finally:
            await system.aclose()

    return asyncio.run(main())


def test_a_refused_good_answer_stands_when_the_takeover_fails(prefix: str,
                                                              tmp_path: Path) -> None:
    """Run 2 ends in a 503 (after its retries): it billed nothing, so run 1's bill is
    the one kept, and run 1's answer is recorded, not the failure."""
    async def fails(run: LineRun) -> LineAnswer:
        return LineAnswer(503, {"error": {"message": "later", "type": "server_error",
                                          "param": None, "code": "service_unavailable"}})

    batch, output, errors = _stall_then_takeover(prefix, tmp_path, fails, line_retries=1,
                                                 retry_backoff_s=0.3)
    assert batch["status"] == "completed"
    assert [line["response"]["body"]["choices"][0]["message"]["content"]
            for line in output] == ["run 1"]
    assert errors == []
    assert batch["request_counts"] == {"total": 1, "completed": 1, "failed": 0}


def test_a_refused_good_answer_is_kept_when_the_batch_is_cancelled(prefix: str,
                                                                    tmp_path: Path) -> None:
    """Run 2 waits out a rate limit when the batch is cancelled: it never ran, and the
    line's output is run 1's answer, not `batch_cancelled`."""
    async def limited(run: LineRun) -> LineAnswer:
        return LineAnswer(429, {"error": {"message": "slow down", "type": "rate_limit_error",
                                          "param": None, "code": "rate_limit_exceeded"}},
                          {"retry-after": "30"})

    async def cancel(system: Any, batch_id: str) -> None:
        assert await system.batches.cancel(OWNER, batch_id, time.time()) is not None

    batch, output, errors = _stall_then_takeover(prefix, tmp_path, limited, cancel)
    assert batch["status"] == "cancelled"
    assert [line["response"]["body"]["choices"][0]["message"]["content"]
            for line in output] == ["run 1"]
    assert errors == []
    assert batch["request_counts"] == {"total": 1, "completed": 1, "failed": 0}


def test_a_takeovers_billed_failure_is_recorded_not_the_refused_answer(
        prefix: str, tmp_path: Path) -> None:
    """Run 2 ends in a 500 that may have billed (the gateway failed after its upstream
    answered): its bill stands, so its failure is recorded, not run 1's answer."""
    async def breaks(run: LineRun) -> LineAnswer:
        return LineAnswer(500, {"error": {"message": "internal", "type": "server_error",
                                          "param": None, "code": "internal_error"}})

    batch, output, errors = _stall_then_takeover(prefix, tmp_path, breaks)
    assert batch["request_counts"] == {"total": 1, "completed": 0, "failed": 1}
    assert output == []
    assert [line["response"]["status_code"] for line in errors] == [500]
