"""What one replica may spend from memory while Redis is unreachable (fail_open).

Without Redis no replica can see the others' spend, so each one serves every
team under a small, fixed allowance of its own:

    spend per team  <= min(fail_open_usd_per_replica, the team's last known
                           remaining hard budget)
    requests/minute <= fail_open_rpm_per_replica

so the worst overspend of an outage is bounded by
``replicas x fail_open_usd_per_replica`` per team, and a team that was
already out of budget stays out. Every spend is journalled
(``journal.py``) and lands in Redis when it is back; the allowance then
starts again from zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from budget.scripts import ScopeFigures, SoftHard


def hard_left(figures: ScopeFigures, limits: SoftHard) -> int | None:
    """Nano-USD a team has left under its hard limits, as Redis last said (its spend
    and holds then), or None without a hard limit: the ceiling of its allowance."""
    left = [hard - spent - figures.reserved
            for hard, spent in ((limits.daily_hard, figures.spent_day),
                                (limits.monthly_hard, figures.spent_month))
            if hard is not None]
    return max(0, min(left)) if left else None


@dataclass
class _TeamAllowance:
    reserved: int = 0  # nano-USD of local reservations not yet settled
    spent: int = 0  # nano-USD settled since the last reconcile
    minute: int = -1
    requests: int = 0


@dataclass
class LocalAllowance:
    """Per-team counters of this replica's fail-open spend and request rate."""

    cap_nanousd: int
    rpm: int
    _teams: dict[str, _TeamAllowance] = field(default_factory=dict)

    def admit(self, team: str, amount: int, minute: int, ceiling: int | None) -> str | None:
        """Count a local reservation, or return the limit it would cross.

        ``ceiling`` is the team's remaining hard budget as last seen in Redis
        (None if never seen). Runs without awaiting, so concurrent requests of
        this replica cannot both pass on the same headroom.
        """
        state = self._teams.setdefault(team, _TeamAllowance())
        if state.minute != minute:
            state.minute, state.requests = minute, 0
        if state.requests + 1 > self.rpm:
            return "rpm"
        cap = self.cap_nanousd if ceiling is None else min(self.cap_nanousd, ceiling)
        if state.reserved + state.spent + amount > cap:
            return "fail_open"
        state.requests += 1
        state.reserved += amount
        return None

    def settle(self, team: str, amount: int, cost: int) -> None:
        state = self._teams.setdefault(team, _TeamAllowance())
        state.reserved = max(0, state.reserved - amount)
        state.spent += cost

    def committed(self, team: str) -> int:
        state = self._teams.get(team)
        return 0 if state is None else state.reserved + state.spent

    def forget_spent(self) -> None:
        """Redis holds every journalled spend again: start a fresh allowance.

        Reservations still in flight keep counting until they settle.
        """
        for state in self._teams.values():
            state.spent = 0
