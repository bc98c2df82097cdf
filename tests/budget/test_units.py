"""Pure parts of the budget module: money, config, key layout, URL parsing, replies."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from pydantic import ValidationError

from budget.keys import KeySpace, Windows
from budget.nanousd import cost_nanousd, usd, usd_to_nano
from budget.redis_client import cluster_url
from budget.rejections import rate_retry_after
from budget.scripts import ReserveReply, ScopeFigures, SoftHard, limit_values
from core.budget_config import BudgetSettings, Limits
from tests.budget.conftest import FakeClock


def test_cost_is_exact_integer_nanousd() -> None:
    # 1200 * 0.15 + 300 * 0.60 = 360 USD per million -> 360_000 nano-USD
    assert cost_nanousd(1200, 300, 0.15, 0.60) == 360_000
    # 0.1 is not exact in binary; the decimal text is used, so no 0.0999999 drift
    assert cost_nanousd(1, 0, 0.1, 0) == 100
    assert sum(cost_nanousd(1, 1, 0.1, 0.2) for _ in range(10_000)) == 3_000_000


def test_cost_rounds_half_up_once_per_request() -> None:
    # 1 token at 0.0005 $/Mtok = 0.5 nano: half rounds up
    assert cost_nanousd(1, 0, 0.0005, 0) == 1
    # two halves are summed before rounding: 0.5 + 0.5 = 1, not 1 + 1 = 2
    assert cost_nanousd(1, 1, 0.0005, 0.0005) == 1
    assert cost_nanousd(0, 0, 3.0, 15.0) == 0
    with pytest.raises(ValueError):
        cost_nanousd(-1, 0, 1, 1)


def _by_hand(parts: list[tuple[int, str]]) -> int:
    """The bill worked out apart from the product: each part's tokens times its price
    as written (USD per million tokens), in exact fractions, rounded half-up once."""
    total = sum((Fraction(n) * Fraction(price) * 1000 for n, price in parts), Fraction(0))
    return math.floor(total + Fraction(1, 2))


@pytest.mark.parametrize("parts", [
    # uncached, output, cached, written: llama.cpp's test prices, Anthropic's, and prices
    # past nine decimals (the Decimal path)
    [(5, "0.5"), (32, "1.0"), (633, "0.05"), (0, "0")],
    [(18, "3.0"), (64, "15.0"), (1510, "0.3"), (0, "3.75")],
    [(26, "3.0"), (14, "15.0"), (3014, "0.3"), (1500, "3.75")],
    [(7, "0.1234567891"), (3, "0.9876543219"), (11, "0.0123456789"), (13, "1.2345678912")],
])
def test_cached_and_written_parts_cost_what_they_cost_by_hand(
        parts: list[tuple[int, str]]) -> None:
    """Every money test's expected bill is the product's own ``cost_nanousd``: this one
    holds it to arithmetic done apart, cache reads and writes each at their own price."""
    (i, pi), (o, po), (c, pc), (w, pw) = parts
    assert cost_nanousd(i, o, float(pi), float(po), c, float(pc), w, float(pw)) == _by_hand(parts)
    assert cost_nanousd(i + c + w, o, float(pi), float(po)) == _by_hand(
        [(i + c + w, pi), (o, po)])


def test_usd_conversions() -> None:
    assert usd_to_nano(12.5) == 12_500_000_000
    assert usd_to_nano(0.1) == 100_000_000
    assert usd(1_500_000_000) == 1.5


def test_limits_validate_soft_below_hard() -> None:
    Limits(daily_soft_usd=5, daily_hard_usd=5)
    with pytest.raises(ValidationError, match="daily_soft_usd"):
        Limits(daily_soft_usd=6, daily_hard_usd=5)
    with pytest.raises(ValidationError, match="monthly_soft_usd"):
        Limits(monthly_soft_usd=6, monthly_hard_usd=5)
    with pytest.raises(ValidationError):
        Limits(rpm=0)
    with pytest.raises(ValidationError):
        Limits(daily_hard_usd=-1)
    with pytest.raises(ValidationError):
        Limits(daily_limit=3)  # type: ignore[call-arg]  # extra="forbid": typos fail


def test_budget_settings_validate_timezone_and_policy() -> None:
    assert BudgetSettings().fail_policy == "fail_closed"
    assert BudgetSettings(timezone="Europe/Paris").timezone == "Europe/Paris"
    with pytest.raises(ValidationError, match="timezone"):
        BudgetSettings(timezone="Mars/Olympus")
    with pytest.raises(ValidationError):
        BudgetSettings(fail_policy="maybe")  # type: ignore[arg-type]


def test_windows_follow_the_configured_timezone() -> None:
    clock = FakeClock("2026-11-30T23:30:00")  # UTC: already Dec 1st in Paris
    assert KeySpace("rg", "UTC", clock).windows().day == "2026-11-30"
    paris = KeySpace("rg", "Europe/Paris", clock).windows()
    assert (paris.day, paris.month) == ("2026-12-01", "2026-12")
    assert paris.seconds_left_in_minute(clock()) == 60
    clock.now += 45.5
    assert paris.seconds_left_in_minute(clock()) == 15


def test_all_keys_of_a_team_share_one_hash_tag() -> None:
    keys = KeySpace("rg", "UTC")
    w = keys.windows(0)
    names = keys.reserve_keys("search", w) + keys.settle_keys("search", w)
    assert all(n.startswith("{rg:search}:") for n in names)
    # a brace in a name cannot end the tag early
    assert keys.tag("a}b{c") == "{rg:a%7Db%7Bc}"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://h:6379/0", ("redis://h:6379/0", False)),
        ("redis+cluster://h:7000", ("redis://h:7000", True)),
        ("rediss+cluster://u:p@h:7000", ("rediss://u:p@h:7000", True)),
        ("redis://h:7000?cluster=true&ssl_cert_reqs=none", ("redis://h:7000?ssl_cert_reqs=none", True)),
        ("redis://h:7000?cluster=false", ("redis://h:7000", False)),
    ],
)
def test_cluster_url(url: str, expected: tuple[str, bool]) -> None:
    assert cluster_url(url) == expected


def test_reply_parsing_and_soft_limits() -> None:
    raw = [12, -1, 100, -1, b"10", b"20", b"5",   # the team's ds ms dh mh and d m r
           0, b"daily", b"key", 90, 100, 0, 1,     # a refused request, the team soft
           1, b"", b"", 0, 0, 0, 2]                # an admitted one, its key soft
    refused, admitted = ReserveReply.parse_batch(raw)
    assert (refused.ok, refused.limit, refused.scope, refused.current, refused.limit_value,
            refused.soft) == (False, "daily", "key", 90, 100, 1)
    assert (admitted.ok, admitted.soft) == (True, 2)
    assert admitted.team is refused.team == ScopeFigures(10, 20, 5)
    assert refused.team_limits == SoftHard(12, None, 100, None)
    assert refused.team_limits.soft_reached(refused.team)  # 10 + 5 >= 12
    assert limit_values(Limits(daily_hard_usd=1.5, rpm=7)) == {"dh": 1_500_000_000, "rpm": 7}


@pytest.mark.parametrize(
    ("now_count", "previous_count", "limit", "need", "elapsed_s", "expected"),
    [
        (3, 0, 3, 1, 15, 65),     # full this minute: wait for it to become the previous one
        (0, 3, 3, 1, 5, 15),      # the previous minute's share fades to 2 by 20 s in
        (1, 3, 3, 1, 30, 10),     # at 40 s: 1 + 3 x 1/3 + 1 = 3 fits
        (0, 0, 150, 200, 10, 110),  # never fits: two windows from now
    ],
)
def test_rate_retry_after_is_when_the_sliding_window_has_room(
        now_count: int, previous_count: int, limit: int, need: int, elapsed_s: float,
        expected: int) -> None:
    got = rate_retry_after(now_count=now_count, previous_count=previous_count, limit=limit,
                           need=need, elapsed_s=elapsed_s)
    assert got == expected
    # and the window really has room then (and not a second earlier, unless it is 1 s)
    def fits(t: float) -> bool:
        if t < 60:
            return now_count + previous_count * (60 - t) / 60 + need <= limit + 1e-9
        return now_count * (120 - t) / 60 + need <= limit + 1e-9
    if need <= limit:
        assert fits(elapsed_s + got) and (got == 1 or not fits(elapsed_s + got - 1))


def test_previous_minute_weight() -> None:
    w = Windows("2026-11-29", "2026-11", minute=1000)
    assert w.previous_minute_weight(1000 * 60) == 1.0
    assert w.previous_minute_weight(1000 * 60 + 20) == 0.6666   # rounded down
    assert w.previous_minute_weight(1000 * 60 + 60) == 0.0
