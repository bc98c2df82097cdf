"""Marks in Redis for feedback teams' requests that run long, so feedback finds them as they end.

    marks = RunningMarks(store, after_s=120, max_age_s=86400)
    marks.opened("acme", request_id, started_s=time.time())   # a dict insert
    marks.closed(request_id)                                  # a dict pop
    await marks.sync()                 # in the recorder's loop, every FLUSH_S

Feedback on an id waits for its record only while the id is fresh (issued no
longer ago than the request deadline plus a few seconds, ``gateway/routes/
feedback.py``). A stream may run longer than that: the replica serving it
marks it in Redis once it has run ``after_s`` (``escalation.deadline_s``),
renews the mark every ``MARK_EVERY_S`` while it runs, and cuts the mark to
``ENDED_TTL_S`` once it has ended, long enough for its record's flush. A
lookup that finds a mark and no record is "running", and waits like a fresh
one (``labelling/recorder.py``). Only requests running past ``after_s`` cost
a write; entries older than ``max_age_s`` are dropped, so a request whose
end was never reported cannot stay marked.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from labelling.store import LabelStore

logger = logging.getLogger("routegate.labels")

MARK_EVERY_S = 30.0
MARK_TTL_S = 90
ENDED_TTL_S = 5


@dataclass
class RunningMarks:
    store: LabelStore
    after_s: float = 120.0               # escalation.deadline_s: past it, a request is marked
    max_age_s: float = 86400.0           # learning.feedback_window_s: never tracked longer
    # request id -> (team, wall-clock start); when each long one was last marked
    # (monotonic); marked ones that have ended, their marks still to be cut.
    _open: dict[str, tuple[str, float]] = field(default_factory=dict)
    _marked: dict[str, float] = field(default_factory=dict)
    _ended: dict[str, str] = field(default_factory=dict)

    def opened(self, team: str, request_id: str, started_s: float) -> None:
        """A request of a team with feedback on has started (at ``started_s``,
        wall clock: its id's time, so the wait before it was parsed counts)."""
        self._open[request_id] = (team, started_s)

    def closed(self, request_id: str) -> None:
        entry = self._open.pop(request_id, None)
        if entry is not None and self._marked and self._marked.pop(request_id, None) is not None:
            self._ended[request_id] = entry[0]

    async def sync(self) -> int:
        """Mark (or renew) every request running longer than ``after_s``, and cut
        the marks of those that have ended; one round trip. The number marked."""
        if not self._open and not self._ended:
            return 0
        now, clock = time.time(), time.monotonic()
        due: list[tuple[str, str]] = []
        for request_id, (team, started) in list(self._open.items()):
            age = now - started
            if age > self.max_age_s:                   # its end was never reported
                self.closed(request_id)
            elif age >= self.after_s and (clock - self._marked.get(request_id, -MARK_EVERY_S)
                                          >= MARK_EVERY_S):
                due.append((team, request_id))
        ended = [(team, request_id) for request_id, team in self._ended.items()]
        if not due and not ended:
            return 0
        try:
            await self.store.mark_running(due, MARK_TTL_S, ended=ended, ended_ttl_s=ENDED_TTL_S)
        except Exception as exc:                      # Redis down: the next loop tries again
            logger.warning("could not mark %d long requests (%s: %s)", len(due),
                           type(exc).__name__, exc)
            return 0
        for _, request_id in ended:
            self._ended.pop(request_id, None)
        for team, request_id in due:
            if request_id in self._open:              # still running: renew it later
                self._marked[request_id] = clock
            else:                                     # ended while the marks were sent
                self._ended[request_id] = team
        return len(due)
