"""raise_if_cancelled: a loop whose awaits swallow a cancellation still ends."""

from __future__ import annotations

import asyncio
import contextlib

from core.aio import raise_if_cancelled


async def swallowing_call() -> None:
    """An await that eats the CancelledError, as wait_for can on Python 3.11."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(0.01)


async def loop(turns: list[int], check: bool) -> None:
    while len(turns) < 500:
        if check:
            raise_if_cancelled()
        turns.append(1)
        await swallowing_call()


async def run(check: bool) -> tuple[bool, int]:
    turns: list[int] = []
    task = asyncio.create_task(loop(turns, check))
    await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    return task.cancelled(), len(turns)


def test_a_loop_that_checks_ends_on_cancel() -> None:
    cancelled, turns = asyncio.run(run(check=True))
    assert cancelled and turns < 20


def test_without_the_check_the_same_loop_runs_on() -> None:
    """The failure the helper exists for: the cancel is lost and the loop runs to its end."""
    cancelled, turns = asyncio.run(run(check=False))
    assert not cancelled and turns == 500

