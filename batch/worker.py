"""The batch worker: takes lines off the shared stream and runs them, a few at a time.

    worker = BatchWorker(store, files, queue, run_line, settings, consumer="host-1234-ab")
    task = asyncio.create_task(worker.run())     # until cancelled
    await worker.aclose()

``run_line(owner, url, body, run) -> LineAnswer(status, body, headers)`` is
injected (``run``: the line's stable id and this run's generation, ``LineRun``):
the gateway passes its request pipeline, tests may pass anything, and this
package never imports the gateway. At most ``concurrency`` lines run per
replica; entries are read only when a slot is free, so a busy replica
never hoards work another could do.

A line refused with 429 for a rate (the team's rpm/tpm, an upstream's limit,
a full queue) waits the refusal's ``retry-after``, with jitter, and runs
again for as long as its batch is in progress and inside its window: a
rate-limited team's batch is paced, not failed. ``line_retries`` are only for
503s; ``insufficient_quota`` is final at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson
from redis.exceptions import RedisError

from batch.blobs import BlobMissing
from batch.files import FileStore
from batch.lifecycle import Lifecycle
from batch.queue import WorkItem, WorkQueue
from batch.records import LineRun, Owner, line_id, result_line
from batch.store import BatchStore
from core.aio import raise_if_cancelled
from core.batch_config import BatchSettings

log = logging.getLogger("routegate.batch")


class LineAnswer(NamedTuple):
    """What ``run_line`` returns: the HTTP status, the JSON body and the headers."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = MappingProxyType({})


RunLine = Callable[[Owner, str, dict[str, Any], LineRun], Awaitable[LineAnswer]]
INTERNAL = LineAnswer(500, {"error": {
    "message": "The gateway hit an internal error running this request.",
    "type": "server_error", "param": None, "code": "internal_error"}})
REDIS_BACKOFF_S = 1.0
VALIDATING_WAIT_S = 10.0
STOP_GRACE_S = 5.0
# A replica refusing batch work looks again this often.
REFUSED_WAIT_S = 1.0
# A rate-limited line waits at most this long at a time (a minute's window
# has room again by then), and looks at its batch this often while it waits.
RATE_WAIT_MAX_S = 60.0
RATE_CHECK_S = 1.0


# A line's answer that billed nothing: refused before any upstream call (a hard
# budget, a rate), or no upstream could answer (503 once its retries are spent).
UNBILLED = frozenset({429, 503})
MAX_TOKENS_COUNTED = 1 << 40


def _count(value: Any) -> int:
    return min(max(value, 0), MAX_TOKENS_COUNTED) if type(value) is int else 0


def _tokens(body: dict[str, Any]) -> tuple[int, int]:
    """(prompt, completion) tokens of an answer's usage: whole numbers, bounded."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def rate_limited(answer: LineAnswer) -> bool:
    """A 429 that passes with time (a rate, a queue), not a hard budget limit."""
    error = answer.body.get("error") if isinstance(answer.body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return answer.status == 429 and code != "insufficient_quota"


def rate_wait_s(headers: Mapping[str, str], fallback_s: float) -> float:
    """How long to wait before running a rate-limited line again: its ``retry-after``
    (bounded), plus jitter so the lines refused together do not return together."""
    try:
        wait = float(headers.get("retry-after") or fallback_s)
    except ValueError:
        wait = fallback_s
    wait = min(max(wait, 0.1), RATE_WAIT_MAX_S)
    return wait + random.uniform(0, max(0.5, 0.1 * wait))


class BatchWorker:
    def __init__(self, store: BatchStore, files: FileStore, queue: WorkQueue, run_line: RunLine,
                 settings: BatchSettings, consumer: str,
                 refusal: Callable[[], str | None] = lambda: None) -> None:
        self.store, self.files, self.queue = store, files, queue
        # Why this replica must not do batch work now (its blob store is not
        # the one the others use: blob_probe.py), or None.
        self.refusal = refusal
        self.run_line = run_line
        self.settings = settings
        self.consumer = consumer
        self.lifecycle = Lifecycle(store, files, settings)
        self._running: dict[asyncio.Task[None], str] = {}
        self._owners: dict[str, tuple[Owner, str]] = {}
        self._loops: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        """Consume, heartbeat and sweep until cancelled."""
        self._loops = [asyncio.create_task(loop()) for loop in
                       (self._consume, self._heartbeat, self._sweep)]
        try:
            await asyncio.gather(*self._loops)
        finally:
            for task in self._loops:
                task.cancel()

    async def aclose(self) -> None:
        """Stop taking lines; give those running a moment, then cut them."""
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        running = list(self._running)
        if running:
            await asyncio.wait(running, timeout=STOP_GRACE_S)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _consume(self) -> None:
        next_claim = 0.0
        while True:
            raise_if_cancelled()  # redis-py's wait_for may have swallowed a cancel
            if self.refusal():
                await asyncio.sleep(REFUSED_WAIT_S)
                continue
            free = self.settings.concurrency - len(self._running)
            if free <= 0:
                await asyncio.wait(list(self._running), return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                items = []
                if time.monotonic() >= next_claim:
                    next_claim = time.monotonic() + self.settings.claim_interval_s
                    items = await self.queue.claim_stale(self.consumer, self.settings.claim_idle_s,
                                                         free)
                    if items:
                        log.info("batch worker: took over %d line(s) a silent worker held",
                                 len(items))
                if not items:
                    items = await self.queue.read_new(self.consumer, free)
            except (RedisError, OSError) as exc:
                log.warning("batch worker: Redis unavailable (%r); retrying", exc)
                await asyncio.sleep(REDIS_BACKOFF_S)
                continue
            if not items:
                await asyncio.sleep(self.settings.poll_interval_s)
            for entry_id, item in items:
                task = asyncio.create_task(self._run_entry(entry_id, item))
                self._running[task] = entry_id
                task.add_done_callback(self._running.pop)

    async def _heartbeat(self) -> None:
        while True:
            raise_if_cancelled()
            await asyncio.sleep(self.settings.claim_idle_s / 3)
            with contextlib.suppress(RedisError, OSError):
                await self.queue.heartbeat(self.consumer, list(self._running.values()))

    async def _sweep(self) -> None:
        while True:
            raise_if_cancelled()
            if not self.refusal():
                with contextlib.suppress(RedisError, OSError):
                    await self.lifecycle.sweep()
            await asyncio.sleep(self.settings.sweep_interval_s)

    async def _run_entry(self, entry_id: str, item: WorkItem) -> None:
        try:
            if await self._run_item(item):
                await self.queue.done(entry_id)
        except (RedisError, OSError) as exc:
            # Left pending: XAUTOCLAIM hands it out again, and RECORD keeps it once.
            log.warning("batch %s line %d: Redis failed (%r); will be retried",
                        item.batch_id, item.index, exc)
        except Exception:
            log.exception("batch %s line %d: worker error", item.batch_id, item.index)

    async def _run_item(self, item: WorkItem) -> bool:
        """Run one line and record it; False leaves its entry pending for a retry."""
        found = await self._batch(item.batch_id)
        if found is None:
            return True  # the batch is gone
        owner, file_id = found
        try:
            raw = await asyncio.to_thread(self.files.blobs.read_range, file_id, item.offset,
                                          item.length)
        except BlobMissing as exc:
            # The batch holds its input's bytes until it ends, so they were not
            # deleted: this replica does not see the store the others write, or
            # the store lost them. Left pending, for a replica that reads them
            # (or, failing that, the batch's expiry lists the line as expired).
            log.error("batch %s line %d: %s Left for another replica.", item.batch_id,
                      item.index, exc)
            return False
        request = orjson.loads(raw)
        custom_id = request["custom_id"]
        gate, generation = await self._gate(item.batch_id, custom_id)
        if gate == "wait":
            return False
        if gate == "expired":
            await self.lifecycle.advance(item.batch_id)
        if gate != "go":
            return True
        try:
            run = LineRun(line_id(item.batch_id, custom_id), generation)
            answer = await self._call(owner, request["url"], request["body"], item.batch_id,
                                      run)
        except BaseException:
            await asyncio.shield(self.store.abandon_line(item.batch_id))
            raise
        if answer is None:  # cancelled or expired while rate-limited: never ran
            await self.store.abandon_line(item.batch_id)
            return True
        return await self._record(item, custom_id, answer, generation)

    async def _record(self, item: WorkItem, custom_id: str, answer: LineAnswer,
                      generation: int) -> bool:
        """Record run ``generation``'s answer; False leaves the entry pending."""
        status, body = answer.status, answer.body
        ok = 200 <= status < 300
        value = b"%d\t%s\t%s" % (item.index, b"o" if ok else b"e",
                                  result_line(item.batch_id, custom_id, status, body))
        added, done, total = await self.store.record(item.batch_id, custom_id, value, ok=ok,
                                                     tokens=_tokens(body), run=generation,
                                                     unbilled=status in UNBILLED)
        if added == -2:
            # Taken over while this run stalled: the later run records the line (and
            # its bill stands). Left pending for it: an ack would lose the line if
            # that run's replica died too.
            log.info("batch %s line %d: a later run of it started; its answer is kept",
                     item.batch_id, item.index)
            return False
        if done >= total:
            await self.lifecycle.advance(item.batch_id)
        return True

    async def _gate(self, batch_id: str, custom_id: str) -> tuple[str, int]:
        # "validating" lasts while the creator enqueues (about a second).
        deadline = time.monotonic() + VALIDATING_WAIT_S
        while True:
            gate, generation = await self.store.start_line(batch_id, custom_id, time.time())
            if gate != "wait" or time.monotonic() > deadline:
                return gate, generation
            await asyncio.sleep(0.1)

    async def _call(self, owner: Owner, url: str, body: dict[str, Any], batch_id: str,
                    run: LineRun) -> LineAnswer | None:
        """The line's answer: a 503 is retried ``line_retries`` times, a rate limit waited
        out; None when the batch stopped (cancel, expiry) while the line waited."""
        delay, retries = self.settings.retry_backoff_s, 0
        while True:
            try:
                answer = await self.run_line(owner, url, body, run)
            except Exception:
                log.exception("batch %s: line %s raised", batch_id, run.id)
                return INTERNAL
            if rate_limited(answer):
                wait = rate_wait_s(answer.headers, max(self.settings.retry_backoff_s, 1.0))
                if not await self._wait_while_open(batch_id, wait):
                    return None
            elif answer.status == 503 and retries < self.settings.line_retries:
                retries += 1
                await asyncio.sleep(delay)
                delay *= 2
            else:
                return answer

    async def _wait_while_open(self, batch_id: str, seconds: float) -> bool:
        """Sleep ``seconds``; False as soon as the batch is cancelled or past its window."""
        deadline = time.monotonic() + seconds
        while await self.store.still_open(batch_id, time.time()):
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, RATE_CHECK_S))
        return False

    async def _batch(self, batch_id: str) -> tuple[Owner, str] | None:
        """(owner, input file id): fixed for a batch's life, so cached."""
        if batch_id not in self._owners:
            fields = await self.store.fields(batch_id)
            if not fields:
                return None
            if len(self._owners) > 256:
                self._owners.clear()
            self._owners[batch_id] = (Owner(fields["team"], fields["key_hash"]),
                                      fields["input_file_id"])
        return self._owners[batch_id]
