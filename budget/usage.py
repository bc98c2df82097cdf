"""The usage report behind ``GET /usage``: one pipelined read of a team's keys.

{"team": "search", "day": "2026-11-29", "month": "2026-11",
 "spent_today_usd": 1.25, "spent_month_usd": 30.5, "reserved_usd": 0.02,
 "remaining_today_usd": 48.73, "remaining_month_usd": ...,
 "limits": {...effective...}, "override": {...} | None, "soft_limited": false,
 "keys": {"ci": {"spent_today_usd": ..., "spent_month_usd": ..., "reserved_usd": ...}},
 "ledger": [{"day", "model", "requests", "input_tokens", "cached_tokens" and
             "cache_write_tokens" (of the input, read from a prompt cache and written
             to it), "output_tokens", "cost_usd", "cost_nanousd"}, ...]}
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from budget.keys import KeySpace
from budget.nanousd import usd
from budget.overrides import merge
from budget.scripts import (
    LIMIT_FIELDS,
    ScopeFigures,
    SoftHard,
    limit_values,
    limits_from_values,
)
from core.budget_config import Limits

_LEDGER_COUNTS = ("requests", "input_tokens", "cached_tokens", "cache_write_tokens",
                  "output_tokens", "cost_nanousd")


def _decode(raw: dict[Any, Any]) -> dict[str, int]:
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


def _remaining(limit: int | None, committed: int) -> float | None:
    return None if limit is None else usd(max(0, limit - committed))


def _per_key(
    day: dict[str, int], month: dict[str, int], reserved: dict[str, int]
) -> dict[str, dict[str, float]]:
    ids = {f[2:] for f in (*day, *month, *reserved) if f.startswith("k:")}
    return {
        key_id: {
            "spent_today_usd": usd(day.get(f"k:{key_id}", 0)),
            "spent_month_usd": usd(month.get(f"k:{key_id}", 0)),
            "reserved_usd": usd(reserved.get(f"k:{key_id}", 0)),
        }
        for key_id in sorted(ids)
    }


def _ledger_rows(day: str, raw: dict[str, int]) -> list[dict[str, Any]]:
    models = sorted({field.rsplit("|", 1)[0] for field in raw})
    rows = []
    for model in models:
        row: dict[str, Any] = {"day": day, "model": model}
        row.update({c: raw.get(f"{model}|{c}", 0) for c in _LEDGER_COUNTS})
        row["cost_usd"] = usd(row["cost_nanousd"])
        rows.append(row)
    return rows


def _team_override(raw: dict[str, int]) -> Limits | None:
    values = {f: raw[f"team:{f}"] for f in LIMIT_FIELDS if f"team:{f}" in raw}
    return limits_from_values(values) if values else None


async def team_usage(
    redis: Any, keys: KeySpace, team: str, config_limits: Limits | None, *, days: int
) -> dict[str, Any]:
    w = keys.windows()
    today = date.fromisoformat(w.day)
    ledger_days = [(today - timedelta(days=i)).isoformat() for i in range(max(1, days))]
    # Non-transactional: all keys share the team's slot, and a report may
    # straddle a concurrent settle by one request.
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.day(team, w.day))
        pipe.hgetall(keys.month(team, w.month))
        pipe.hgetall(keys.reserved(team))
        pipe.hgetall(keys.override(team))
        for d in ledger_days:
            pipe.hgetall(keys.ledger(team, d))
        raw = [_decode(r) for r in await pipe.execute()]
    day, month, reserved, ovr = raw[:4]
    override = _team_override(ovr)
    effective = merge(config_limits, override)
    lim = limit_values(effective)
    reserved_team = reserved.get("team", 0)
    spent_day, spent_month = day.get("team", 0), month.get("team", 0)
    return {
        "team": team,
        "timezone": str(keys.timezone),
        "day": w.day,
        "month": w.month,
        "spent_today_usd": usd(spent_day),
        "spent_month_usd": usd(spent_month),
        "spent_today_nanousd": spent_day,
        "spent_month_nanousd": spent_month,
        "reserved_usd": usd(reserved_team),
        "remaining_today_usd": _remaining(lim.get("dh"), spent_day + reserved_team),
        "remaining_month_usd": _remaining(lim.get("mh"), spent_month + reserved_team),
        "limits": effective.model_dump() if effective is not None else None,
        "override": override.model_dump(exclude_none=True) if override else None,
        "soft_limited": SoftHard.from_limits(effective).soft_reached(
            ScopeFigures(spent_day, spent_month, reserved_team)
        ),
        "keys": _per_key(day, month, reserved),
        "ledger": [row for d, r in zip(ledger_days, raw[4:], strict=True) for row in _ledger_rows(d, r)],
    }
