"""1,000 concurrent requests through 3 gateway replicas sharing one Redis budget.

The team's daily hard budget covers about 30% of the requests at their worst
case (prompt + max_tokens). Reservations are the worst case and settles the
real usage, so more than 30% may pass; what must hold is that Redis never
records more than the limit, that it records exactly what the upstream
reported (to the nano-dollar), and that every refusal is a clean 429.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from budget.nanousd import cost_nanousd, usd, usd_to_nano
from classifiers.length import counter_for
from tests.e2e.traffic import (
    HELLO,
    client_session,
    is_quota_error,
    outcome_cost,
    prices,
    redis_books,
    send_chat,
    wait_books,
)
from tests.support import OTHER_KEY, base_config, run_gateway, run_simulator

REQUESTS = 1000
REPLICAS = 3
MAX_TOKENS = 30  # the simulator's outputs (mean 20) are often cut here: reservations stay tight
COVERED_SHARE = 0.3
# Fill each replica's Redis connection pool (64) first, through the other team:
# a replica in service is warm, and opening 64 connections on an event loop
# that 333 requests keep busy can exceed the 1 s connect timeout (a 503).
WARM_UP_PER_REPLICA = 64


def worst_case_nanousd(config: dict) -> int:
    fast = next(m for m in config["models"] if m["name"] == "fast")["price"]
    prompt = counter_for("o200k_base").count_messages(HELLO)
    return cost_nanousd(prompt, MAX_TOKENS, fast["input_per_mtok"], fast["output_per_mtok"])


@pytest.mark.timeout(180)
def test_hard_limit_holds_and_spend_is_exact_across_replicas() -> None:
    with contextlib.ExitStack() as stack:
        sim = stack.enter_context(run_simulator("--tpot-ms", "1", "--prefill", "1000000",
                                                "--output-mean", "20"))
        config = base_config(sim)
        hard = int(worst_case_nanousd(config) * REQUESTS * COVERED_SHARE)
        config["teams"][0]["budget"] = {"daily_hard_usd": usd(hard)}
        assert usd_to_nano(usd(hard)) == hard
        client = stack.enter_context(redis_books(config))
        gateways = [stack.enter_context(run_gateway(config)) for _ in range(REPLICAS)]

        async def drive() -> list:
            async with client_session() as session:
                warm = await asyncio.gather(*(
                    send_chat(session, gateways[i % REPLICAS].base_url, max_tokens=1,
                              api_key=OTHER_KEY)
                    for i in range(WARM_UP_PER_REPLICA * REPLICAS)))
                assert all(o.status == 200 for o in warm), [o for o in warm if o.status != 200]
                return await asyncio.gather(*(
                    send_chat(session, gateways[i % REPLICAS].base_url, stream=i % 2 == 1,
                              max_tokens=MAX_TOKENS, timeout_s=90)
                    for i in range(REQUESTS)))

        outcomes = asyncio.run(drive())
        ok = [o for o in outcomes if o.status == 200]
        refused = [o for o in outcomes if o.status == 429]
        books = wait_books(client, config, lambda b: b.reservations == 0 and b.reserved == 0)
        for gw in gateways:
            assert gw.proc.poll() is None, gw.log()[-3000:]

    table = prices(config)
    expected = sum(outcome_cost(o, table) for o in ok)
    spent = books.spent_days
    print(f"\nconcurrency: {len(ok)} succeeded ({sum(o.stream for o in ok)} streamed), "
          f"{len(refused)} refused with 429, recorded spend {spent} nano-USD "
          f"(${usd(spent):.6f}), hard limit {hard} nano-USD, overspend {max(0, spent - hard)}, "
          f"usage cost {expected} nano-USD: "
          f"{'exact' if spent == expected else f'OFF BY {spent - expected}'}")
    others = [o for o in outcomes if o.status not in (200, 429)]
    assert not others, others[:5]
    assert len(ok) + len(refused) == REQUESTS
    assert ok and refused
    assert all(is_quota_error(o) for o in refused), [o for o in refused if not is_quota_error(o)][:3]
    assert all(o.usage is not None and o.error is None for o in ok), ok[:3]
    assert spent <= hard
    assert spent == expected
    assert books.spent_months == expected
    assert books.ledger_cost == expected
    assert books.ledger_requests == len(ok)
    assert books.reserved == 0 and books.reservations == 0
