"""What the request path hands over, written off it: a bounded buffer and a flush loop.

    recorder = Recorder(store, settings)
    state.spawn(recorder.run())                       # flushes every FLUSH_S
    recorder.observe("acme", request_id, messages, labels=[("small", 0.0, "escalation"),
                                                          ("large", 1.0, "escalation")])

``observe`` costs joining the conversation's text and an append (nothing at
all for a request with no labels and no feedback): the prompt's sketch (about 0.25 ms of featurizing) and the
Redis write happen in the flush loop, a pipelined round trip per flush, in
slices that yield to the event loop. The buffer is bounded in entries
(``learning.max_pending``) and in the prompt characters it holds
(``MAX_PENDING_CHARS``); past either the newest are dropped and counted
(``dropped``), never the request. A flush that fails is logged and its
labels are lost (``lost``): labels are evidence, not money, and a stalled
Redis must not grow the buffer.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from classifiers.complexity import conversation_text
from classifiers.labels import kept_text
from classifiers.sketch import sketch_of
from core.learning_config import LearningSettings
from labelling.running import RunningMarks
from labelling.store import LabelStore, Write

logger = logging.getLogger("routegate.labels")

FLUSH_S = 0.25
# An unknown request id is asked again after these waits: the replica that
# answered it flushes every FLUSH_S, later when it is busy sketching a backlog.
FEEDBACK_RETRY_S = (0.25, 0.5, 1.0)
MAX_WAITING = 16            # per team: feedback requests waiting so at once, on a replica
MAX_PENDING_CHARS = 64 * 1024 * 1024
SLICE = 16                  # sketches between yields to the event loop
MAX_PER_FLUSH = 2000
MAX_RUNNING_WAITING = 4     # per team, apart from those: waiting on ids marked as running


@dataclass(slots=True)
class _Pending:
    write: Write
    text: str                           # the conversation as a label keeps it (kept_text)
    n_messages: int
    flags: tuple[bool, bool]            # has_tools, has_response_format
    keep_text: bool
    n_chars: int                        # the whole conversation's length


@dataclass
class Recorder:
    store: LabelStore
    settings: LearningSettings
    written: int = 0
    dropped: int = 0
    lost: int = 0
    _pending: deque[_Pending] = field(default_factory=deque)
    _chars: int = 0
    _waiting: Counter[str] = field(default_factory=Counter)   # team -> feedback waiting
    _throttled: dict[str, float] = field(default_factory=dict)   # team -> monotonic end
    # (team, ok | unknown | already | throttled) -> lookups: routegate_feedback_total
    feedback_results: Counter[tuple[str, str]] = field(default_factory=Counter)
    running_after_s: float = 120.0      # escalation.deadline_s: past it, a request is marked
    running: RunningMarks = field(init=False)
    _waiting_running: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.running = RunningMarks(self.store, self.running_after_s,
                                    self.settings.feedback_window_s)

    def observe(self, team: str, request_id: str, messages: list[dict[str, Any]], *,
                labels: list[tuple[str, float, str]] | None = None,
                served_model: str | None = None, has_tools: bool = False,
                has_response_format: bool = False, keep_text: bool = False) -> None:
        if not labels and served_model is None:
            return
        # As a label file's prompt is read (``classifiers/labels.py``): the same
        # prompt gets the same digest and sketch on either path.
        whole = conversation_text(messages)
        text, n_chars = kept_text(whole), len(whole)
        if (len(self._pending) >= self.settings.max_pending
                or self._chars + len(text) > MAX_PENDING_CHARS):
            self.dropped += 1
            return
        write = Write(team, request_id, b"", labels=list(labels or ()), served_model=served_model)
        self._pending.append(_Pending(write, text, max(len(messages), 1),
                                      (has_tools, has_response_format), keep_text, n_chars))
        self._chars += len(text)

    async def feedback(self, team: str, request_id: str, score: float, *,
                       wait: bool = True) -> tuple[str, str]:
        """``LabelStore.feedback``, for an answer that may have been sent a moment
        ago: what waits here is written first, and with ``wait`` an unknown id is
        asked again over the next 1.75 s (``FEEDBACK_RETRY_S``), while the
        replica that answered it flushes; at most ``MAX_WAITING`` of a team's at
        once, the others answered at once. An id marked as running (a request
        past its deadline, ``labelling/running.py``) waits so too, whatever
        ``wait`` says, in ``MAX_RUNNING_WAITING`` places of its own. A team the
        store has throttled is answered from memory, without Redis, until its
        window ends."""
        until = self._throttled.get(team, 0.0)
        if until > time.monotonic():
            self.feedback_results[team, "throttled"] += 1
            return "throttled", str(math.ceil(until - time.monotonic()))
        waits, on_running = wait and self._waiting[team] < MAX_WAITING, False
        if waits:
            self._waiting[team] += 1     # taken now: the awaits below let others in
        try:
            if self._pending:
                await self.flush()
            status, detail = await self.store.feedback(team, request_id, score,
                                                       count_miss=not waits)
            if status == "running" and not waits:
                # A long request, ending now maybe: it waits too, in places of its own,
                # so polling a long stream cannot take fresh answers' places.
                on_running = self._waiting_running[team] < MAX_RUNNING_WAITING
                if on_running:
                    self._waiting_running[team] += 1
            if status in ("unknown", "running") and (waits or on_running):
                status, detail = await self._ask_again(team, request_id, score)
            if status == "running":          # still running: no record to score yet
                status = "unknown"
        finally:
            _release(self._waiting, team, waits)
            _release(self._waiting_running, team, on_running)
        if status == "throttled":
            self._throttled[team] = time.monotonic() + int(detail)
        self.feedback_results[team, status] += 1
        return status, detail

    async def _ask_again(self, team: str, request_id: str, score: float) -> tuple[str, str]:
        for n, delay in enumerate(FEEDBACK_RETRY_S, 1):
            await asyncio.sleep(delay)
            # The last try counts a miss, even on an id still running 1.75 s on.
            status, detail = await self.store.feedback(
                team, request_id, score, count_miss=n == len(FEEDBACK_RETRY_S),
                count_running=n == len(FEEDBACK_RETRY_S))
            if status not in ("unknown", "running"):
                break
        return status, detail

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            try:
                await self.flush()
            except Exception:                  # a bug here must not stop the recording
                logger.exception("the label recorder's flush failed")
            try:
                await self.running.sync()
            except Exception:
                logger.exception("the label recorder's running marks failed")

    async def flush(self) -> int:
        """Write what is waiting (at most MAX_PER_FLUSH); the number written."""
        batch: list[Write] = []
        while self._pending and len(batch) < MAX_PER_FLUSH:
            item = self._pending.popleft()
            self._chars -= len(item.text)
            try:
                batch.append(_finish(item))
            except Exception:                  # one prompt the featurizer chokes on
                self.lost += 1
                logger.exception("request %s: its prompt could not be sketched",
                                 item.write.request_id)
            if len(batch) % SLICE == 0:
                await asyncio.sleep(0)
        if not batch:
            return 0
        try:
            await self.store.write(batch)
        except Exception as exc:           # Redis down or slow: log, count, move on
            self.lost += len(batch)
            logger.warning("could not store %d labels (%s: %s)", len(batch),
                           type(exc).__name__, exc)
            return 0
        self.written += len(batch)
        return len(batch)


def _release(waiting: Counter[str], team: str, taken: bool) -> None:
    if taken:
        waiting[team] -= 1
        if not waiting[team]:
            del waiting[team]


def _finish(item: _Pending) -> Write:
    has_tools, has_format = item.flags
    sketch = sketch_of(item.text, n_messages=item.n_messages, has_tools=has_tools,
                       has_response_format=has_format, n_chars=item.n_chars)
    item.write.sketch = sketch.to_bytes()
    item.write.text = item.text if item.keep_text else None
    return item.write
