"""A replica killed with -9 mid-stream: its reservations expire, nothing is billed for them.

Replica A holds the worst case of four slow streams in Redis when it dies.
Nobody settles them; after ``budget.reservation_ttl_s`` the next reserve or
settle of the team (here: a request through replica B) releases them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import aiohttp
import pytest

from budget.pricing import cost_nanousd
from classifiers.length import counter_for
from gateway.money.prompt_meter import PromptMeter
from tests.e2e.traffic import (
    HELLO,
    client_session,
    outcome_cost,
    prices,
    read_books,
    redis_books,
    send_chat,
    wait_books,
)
from tests.support import TEST_KEY, Gateway, base_config, run_gateway, run_simulator

TTL_S = 2
STREAMS = 4
SLOW_MAX_TOKENS = 40  # the "slow" behaviour decodes 5 tokens/s: about 8 s per stream


def kill_replica(gw: Gateway) -> None:
    """SIGKILL the whole process group (run_gateway starts a new session: pgid == pid)."""
    os.killpg(gw.proc.pid, signal.SIGKILL)
    gw.proc.wait(10)
    with pytest.raises(ProcessLookupError):
        os.killpg(gw.proc.pid, 0)  # no worker of the replica survived


async def hold_stream(session: aiohttp.ClientSession, gw: Gateway, first_chunk: asyncio.Event
                      ) -> str:
    """Stream from the slow model until the replica dies; say how the stream ended."""
    body = {"model": "slowpoke", "messages": HELLO, "max_tokens": SLOW_MAX_TOKENS,
            "stream": True}
    try:
        async with asyncio.timeout(30):
            async with session.post(gw.base_url + "/chat/completions", json=body,
                                    headers={"authorization": f"Bearer {TEST_KEY}"}) as resp:
                assert resp.status == 200, await resp.text()
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        first_chunk.set()
        return "completed"
    except aiohttp.ClientError as exc:
        return f"cut: {exc!r}"


@pytest.mark.timeout(90)
def test_reservations_of_a_killed_replica_expire_unbilled() -> None:
    with contextlib.ExitStack() as stack:
        sim = stack.enter_context(run_simulator("--tpot-ms", "1", "--prefill", "1000000"))
        config = base_config(sim)
        config["budget"]["reservation_ttl_s"] = TTL_S
        config["teams"][0]["budget"] = {"daily_hard_usd": 5.0}
        table = prices(config)
        # The reservation is the request's ceiling: the prompt at the doomed replica's
        # cold bound (it has seen one answer), its max_tokens of output.
        prompt = PromptMeter().bound(counter_for("o200k_base").count_messages(HELLO), len(HELLO))
        slow_worst = cost_nanousd(prompt, SLOW_MAX_TOKENS, *table["slowpoke"])
        client = stack.enter_context(redis_books(config))
        doomed = stack.enter_context(run_gateway(config))
        survivor = stack.enter_context(run_gateway(config))

        async def scenario() -> dict:
            async with client_session() as session:
                settled = await send_chat(session, doomed.base_url)  # billed before the crash
                assert settled.status == 200, settled
                before = wait_books(client, config, lambda b: b.reserved == 0)
                events = [asyncio.Event() for _ in range(STREAMS)]
                streams = [asyncio.create_task(hold_stream(session, doomed, e)) for e in events]
                async with asyncio.timeout(15):
                    await asyncio.gather(*(e.wait() for e in events))
                kill_replica(doomed)
                killed_at = time.monotonic()
                at_kill = read_books(client, config)
                async with asyncio.timeout(15):
                    endings = await asyncio.gather(*streams)
                await asyncio.sleep(max(0.0, killed_at + TTL_S + 0.5 - time.monotonic()))
                after_ttl = read_books(client, config)
                touch = await send_chat(session, survivor.base_url)  # purges expired holds
                assert touch.status == 200, touch
                final = wait_books(client, config, lambda b: b.reservations == 0)
                return {"settled": settled, "before": before, "at_kill": at_kill,
                        "endings": endings, "after_ttl": after_ttl, "touch": touch,
                        "final": final}

        r = asyncio.run(scenario())
        assert survivor.proc.poll() is None

    before, at_kill, final = r["before"], r["at_kill"], r["final"]
    billed = outcome_cost(r["settled"], table)
    print(f"\ncrash: reserved {at_kill.reserved} nano-USD in {at_kill.reservations} holds at the "
          f"kill (expected {STREAMS} x {slow_worst}), {r['after_ttl'].reserved} after the TTL "
          f"before any touch, {final.reserved} after a request through the survivor; spend "
          f"{before.spent_days} before, {at_kill.spent_days} at the kill, {final.spent_days} "
          f"at the end; streams: {sorted(set(e.split('(')[0] for e in r['endings']))}")
    assert before.spent_days == billed and before.reserved == 0
    assert at_kill.reserved == STREAMS * slow_worst > 0
    assert at_kill.reservations == STREAMS
    assert at_kill.spent_days == billed  # nothing billed for the killed streams
    assert all(e.startswith("cut") for e in r["endings"]), r["endings"]
    assert final.reserved == 0 and final.reservations == 0
    assert final.spent_days == billed + outcome_cost(r["touch"], table)
    assert final.spent_months == final.spent_days == final.ledger_cost
    assert final.ledger_requests == 2
