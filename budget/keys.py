"""Redis key names and calendar windows of the budget store.

Every key of one team carries the hash tag ``{<prefix>:<team>}``, so on a
Redis Cluster all of them live in one slot and one Lua script can touch them
atomically. With T = ``{rg:search}``:

    T:res:exp          ZSET  request id -> lease expiry (ms, Redis clock; renewed by its replica)
    T:res              HASH  request id -> {"a": nano, "t": tokens, "k": key id, "p": what
                             it has run up, as its replica's lease renewals last recorded}
    T:reserved         HASH  "team" | "k:<key>" -> outstanding reserved nano-USD
    T:d:2026-11-29     HASH  "team" | "k:<key>" -> spent nano-USD that day      (TTL 40 d)
    T:m:2026-11        HASH  "team" | "k:<key>" -> spent nano-USD that month    (TTL 400 d)
    T:rl:<epoch-min>   HASH  "req" "tok" "k:<key>:req" "k:<key>:tok"            (TTL 120 s)
    T:ovr              HASH  "team:dh" ... "k:<key>:tpm" -> admin overrides
    T:ledger:<day>     HASH  "<model>|requests|input_tokens|output_tokens|cost_nanousd"
                                                                                 (TTL 93 d)
    T:settled:<day>    SET   request ids already settled (idempotency)       (TTL 3 d)
    T:once             ZSET  stable request id (a batch line) -> until (ms): settled
                             whatever day it runs again on       (budget.stable_id_ttl_s)
    T:once:bill        HASH  stable request id -> "at|day|key|model|in|out|cost|cached|
                             written" (at: the run's order, a batch line's generation):
                             the bill a later run of the line replaces (stable_id_ttl_s)

Windows are named by date, computed here in the configured timezone, so a
new day starts a new key: nothing is ever reset or overwritten at midnight.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

DAY_TTL_S = 40 * 86400
MONTH_TTL_S = 400 * 86400
LEDGER_TTL_S = 93 * 86400
# Long enough to cover a Redis outage during which settles were journalled:
# a replayed settle must still find its marker and not bill twice.
SETTLED_TTL_S = 3 * 86400
MINUTE_TTL_S = 120

Clock = Callable[[], float]


@dataclass(frozen=True)
class Windows:
    """The calendar windows a request is counted in (fixed at reserve time)."""

    day: str  # "2026-11-29", in the configured timezone
    month: str  # "2026-11"
    minute: int  # minutes since the epoch, for rpm/tpm buckets

    def seconds_left_in_minute(self, now_s: float) -> int:
        return max(1, int((self.minute + 1) * 60 - now_s + 0.999))

    def previous_minute_weight(self, now_s: float) -> float:
        """The share of the last 60 s that falls in the previous minute, rounded
        down to 1e-4 (so a count that just fits is not refused by rounding)."""
        elapsed = min(max(now_s - self.minute * 60, 0.0), 60.0)
        return math.floor((60.0 - elapsed) / 60.0 * 10_000) / 10_000


_CACHE_MAX = 4096       # teams whose key names are kept ready


def _escape(name: str) -> str:
    # Braces would end the hash tag early and scatter a team over slots.
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


class KeySpace:
    """Builds key names and windows; the only place that knows the layout."""

    def __init__(self, prefix: str, timezone: str, clock: Clock = time.time) -> None:
        self._prefix = prefix
        self._tz = ZoneInfo(timezone)
        self.clock = clock
        self._cached: Windows | None = None
        self._tags: dict[str, str] = {}
        # The scripts' KEYS per (team, windows); cleared when the minute turns.
        self._script_keys: dict[tuple[str, Windows, bool], list[str]] = {}
        self._keys_minute = -1

    @property
    def timezone(self) -> ZoneInfo:
        return self._tz

    def windows(self, now_s: float | None = None) -> Windows:
        now_s = self.clock() if now_s is None else now_s
        minute = int(now_s // 60)
        # Every UTC offset in use is a whole number of minutes, so days and
        # months change only on a minute boundary: compute once a minute.
        cached = self._cached
        if cached is not None and cached.minute == minute:
            return cached
        local = datetime.fromtimestamp(now_s, self._tz)
        self._cached = Windows(day=local.strftime("%Y-%m-%d"), month=local.strftime("%Y-%m"),
                               minute=minute)
        return self._cached

    def tag(self, team: str) -> str:
        tag = self._tags.get(team)
        if tag is None:
            if len(self._tags) >= _CACHE_MAX:
                self._tags.clear()
            tag = self._tags[team] = "{" + self._prefix + ":" + _escape(team) + "}"
        return tag

    def day(self, team: str, day: str) -> str:
        return f"{self.tag(team)}:d:{day}"

    def month(self, team: str, month: str) -> str:
        return f"{self.tag(team)}:m:{month}"

    def ledger(self, team: str, day: str) -> str:
        return f"{self.tag(team)}:ledger:{day}"

    def override(self, team: str) -> str:
        return f"{self.tag(team)}:ovr"

    def reserved(self, team: str) -> str:
        return f"{self.tag(team)}:reserved"

    def _shared_keys(self, team: str, w: Windows) -> list[str]:
        """KEYS 1-6, the same in both scripts (common.lua relies on 1-3)."""
        t = self.tag(team)
        return [
            f"{t}:res:exp",
            f"{t}:res",
            self.reserved(team),
            self.day(team, w.day),
            self.month(team, w.month),
            f"{t}:rl:{w.minute}",
        ]

    def hold_keys(self, team: str) -> list[str]:
        """KEYS of renew.lua: the team's holds (common.lua's KEYS 1-3)."""
        t = self.tag(team)
        return [f"{t}:res:exp", f"{t}:res", self.reserved(team)]

    def reserve_keys(self, team: str, w: Windows) -> list[str]:
        """KEYS of reserve.lua, in its order (the caller must not change the list)."""
        return self._keys_of(team, w, True)

    def settle_keys(self, team: str, w: Windows) -> list[str]:
        """KEYS of settle.lua, in its order (the caller must not change the list)."""
        return self._keys_of(team, w, False)

    def _keys_of(self, team: str, w: Windows, reserve: bool) -> list[str]:
        cached = self._script_keys.get((team, w, reserve))
        if cached is not None:
            return cached
        if len(self._script_keys) >= _CACHE_MAX or w.minute != self._keys_minute:
            self._script_keys.clear()
            self._keys_minute = w.minute
        t = self.tag(team)
        if reserve:
            keys = [*self._shared_keys(team, w), self.override(team), f"{t}:rl:{w.minute - 1}"]
        else:
            keys = [*self._shared_keys(team, w), self.ledger(team, w.day), f"{t}:settled:{w.day}",
                    f"{t}:once", f"{t}:once:bill"]
        self._script_keys[(team, w, reserve)] = keys
        return keys
