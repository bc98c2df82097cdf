"""Budget configuration: per-team / per-key limits and the ``budget:`` section.

    budget:
      timezone: Europe/Paris        # calendar days and months are counted here
      fail_policy: fail_closed      # or fail_open (see budget/failopen.py)
    teams:
      - name: search
        budget: {daily_hard_usd: 50, daily_soft_usd: 40, rpm: 600}

Every limit is optional: ``None`` means "no limit of this kind". Dollar
amounts are floats here for the humans writing YAML; they become integer
nano-USD (``budget.nanousd.usd_to_nano``) before they reach Redis.
"""

from __future__ import annotations

from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ConfigDict, Field, field_validator, model_validator

from core.strict import Strict

MAX_USD = 5_000_000.0        # a day or month: 5 * 10**15 nano-USD, still exact as a Lua number
MAX_COUNT = 10**12           # requests or tokens a minute


class Limits(Strict):
    """Spend and rate limits of one scope (a team, or one key of a team).

    A key's limits narrow the team's, never widen them: a request must pass
    both the team's limits (on the team's totals) and its key's limits (on
    that key's own totals).
    """

    # No inf/NaN, and bounds that fit the Redis counters: limits become
    # nano-USD integers, and Redis's Lua numbers are exact only below 2**53.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    daily_hard_usd: float | None = Field(default=None, ge=0, le=MAX_USD)
    daily_soft_usd: float | None = Field(default=None, ge=0, le=MAX_USD)
    monthly_hard_usd: float | None = Field(default=None, ge=0, le=MAX_USD)
    monthly_soft_usd: float | None = Field(default=None, ge=0, le=MAX_USD)
    rpm: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    tpm: int | None = Field(default=None, gt=0, le=MAX_COUNT)

    @model_validator(mode="after")
    def _soft_below_hard(self) -> Limits:
        for window in ("daily", "monthly"):
            soft = getattr(self, f"{window}_soft_usd")
            hard = getattr(self, f"{window}_hard_usd")
            if soft is not None and hard is not None and soft > hard:
                raise ValueError(f"{window}_soft_usd ({soft}) must not exceed {window}_hard_usd ({hard})")
        return self


class BudgetSettings(Strict):
    """The top-level ``budget:`` section of the gateway YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # false: no reservations, limits or ledger at all (a plain router).
    enabled: bool = True
    timezone: str = "UTC"
    fail_policy: Literal["fail_closed", "fail_open"] = "fail_closed"
    # A hold's lease: its replica renews it every third of this while the request
    # runs, so a replica that dies frees its holds (and bills what its requests had
    # run up, as last renewed) within this long.
    reservation_ttl_s: int = Field(default=10, ge=1, le=3600)
    # Start on a Redis whose maxmemory-policy may evict keys (budget/eviction.py):
    # refused under fail_closed unless this is true; said at start-up either way.
    allow_evicting_redis: bool = False
    # While Redis is unreachable under fail_open, each replica lets each team
    # spend at most this much (and this many requests a minute) from memory.
    fail_open_usd_per_replica: float = Field(default=1.0, ge=0, le=MAX_USD)
    fail_open_rpm_per_replica: int = Field(default=60, gt=0)
    # A directory: each replica journals to <journal_path>/<replica_id>.jsonl.
    # None means <data_dir>/budget-journal.
    journal_path: str | None = None
    key_prefix: str = Field(default="rg", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    # A stable request id (a batch line, which may run again after a crash or a
    # retry, on another day) settles once for this long: longer than any batch
    # window (checked against batch.max_completion_window_s) plus its retries.
    stable_id_ttl_s: int = Field(default=14 * 86400, ge=3600, le=400 * 86400)
    # Carried for the routing policy: how far the quality target drops for a
    # team above its soft limit.
    soft_limit_quality_drop: float = Field(default=0.15, ge=0, le=1)

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown timezone {value!r}") from exc
        return value
