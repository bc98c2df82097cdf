"""The handle a request carries from ``reserve`` to ``settle``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from budget.journal import JournalEntry
from budget.keys import Windows

Progress = tuple[str, int, int, int]


@dataclass(slots=True)   # built per request: a frozen init costs a setattr per field
class Reservation:
    """A worst-case amount held for one request until it settles.

    ``windows`` are fixed at reserve time: the request is billed to the day
    and month it was admitted in, even if it settles after midnight, so the
    limit that admitted it is the limit its spend counts against.
    ``local`` marks a fail-open reservation held in this replica's memory.
    ``stable`` marks an id that may be settled again on another day (a batch
    line run again): its settle stays idempotent for ``stable_id_ttl_s``, and of
    two runs the bill of the higher ``run_order`` stands: a batch line's run is
    numbered by Redis when it starts (``batch/scripts.py``, START_LINE), and only
    the highest-numbered run may record its answer, so the bill is the recorded
    answer's whichever run settles, or has its hold expire, first.
    """

    request_id: str
    team: str
    key_id: str | None
    model: str
    amount: int  # nano-USD
    tokens: int  # prompt + max output tokens, counted against tpm
    windows: Windows
    soft_limited: bool
    local: bool = False
    stable: bool = False   # request_id names work that may run again (a batch line)
    run_order: int = 0     # a stable id's: which run this is (a batch line's generation)
    # What the request has run up so far: (model, input tokens, output tokens,
    # nano-USD), or None before anything was. Its lease renewals record it in the
    # hold, which is billed that much if this replica dies before settling.
    progress: Callable[[], Progress | None] | None = None

    def journal_entry(self, input_tokens: int, output_tokens: int, cost: int,
                      model: str | None = None, cached_tokens: int = 0,
                      cache_write_tokens: int = 0) -> JournalEntry:
        return JournalEntry(
            request_id=self.request_id,
            team=self.team,
            key_id=self.key_id,
            model=self.model if model is None else model,   # "": release only
            day=self.windows.day,
            month=self.windows.month,
            minute=self.windows.minute,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_nanousd=cost,
            stable=self.stable,
            at_ms=self.run_order if self.stable else 0,
            cached_tokens=cached_tokens,
            cache_write_tokens=cache_write_tokens,
        )

