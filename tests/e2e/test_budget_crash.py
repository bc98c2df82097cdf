"""A replica killed with -9 mid-stream: its holds are freed within a lease, and what it relayed is billed.

Replica A holds four slow streams in Redis when it dies. While it lived it
renewed their leases (``budget.reservation_ttl_s``, by default 10 s) every
second, recording what each had run up: its prompt and the tokens it had
relayed. Nobody settles them; once the leases run out, the next reserve
or settle of the team (here: a request through replica B) frees the holds
and bills each its recorded progress, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import aiohttp
import pytest

from budget.nanousd import cost_nanousd
from classifiers.length import counter_for
from core.budget_config import BudgetSettings
from gateway.money.prompt_meter import PromptMeter
from tests.e2e.traffic import (
    HELLO,
    client_session,
    outcome_cost,
    parse_sse,
    prices,
    read_books,
    redis_books,
    send_chat,
    wait_books,
)
from tests.support import TEST_KEY, Gateway, base_config, run_gateway, run_simulator

LEASE_S = BudgetSettings().reservation_ttl_s     # the default: the target is "within 10 s"
STREAMS = 4
SLOW_MAX_TOKENS = 80  # the "slow" behaviour decodes 5 tokens/s: about 16 s per stream
RENEWAL_TOKENS = 5 * 2     # what a stream relays between two renewals (1 s apart), and more


def kill_replica(gw: Gateway) -> None:
    """SIGKILL the whole process group (run_gateway starts a new session: pgid == pid)."""
    os.killpg(gw.proc.pid, signal.SIGKILL)
    gw.proc.wait(10)
    with pytest.raises(ProcessLookupError):
        os.killpg(gw.proc.pid, 0)  # no worker of the replica survived


async def hold_stream(session: aiohttp.ClientSession, gw: Gateway, first_chunk: asyncio.Event,
                      received: list[str]) -> str:
    """Stream from the slow model until the replica dies; keep the text received."""
    body = {"model": "slowpoke", "messages": HELLO, "max_tokens": SLOW_MAX_TOKENS,
            "stream": True, "ignore_eos": True}      # vLLM's: all of max_tokens, no early stop
    try:
        async with asyncio.timeout(40):
            async with session.post(gw.base_url + "/chat/completions", json=body,
                                    headers={"authorization": f"Bearer {TEST_KEY}"}) as resp:
                assert resp.status == 200, await resp.text()
                async for line in resp.content:
                    for event in parse_sse(line):
                        for choice in event.get("choices") or ():
                            received.append((choice.get("delta") or {}).get("content") or "")
                    first_chunk.set()
        return "completed"
    except aiohttp.ClientError as exc:
        return f"cut: {exc!r}"


@pytest.mark.timeout(120)
def test_a_killed_replicas_holds_are_freed_and_what_it_relayed_is_billed() -> None:
    with contextlib.ExitStack() as stack:
        sim = stack.enter_context(run_simulator("--tpot-ms", "1", "--prefill", "1000000"))
        config = base_config(sim)
        config["teams"][0]["budget"] = {"daily_hard_usd": 5.0}
        table = prices(config)
        ours = counter_for("o200k_base").count_messages(HELLO)
        # The hold is the request's ceiling: the prompt at the doomed replica's cold
        # bound (it has seen one answer, of another model), its max_tokens of output.
        slow_worst = cost_nanousd(PromptMeter().bound(ours, len(HELLO)), SLOW_MAX_TOKENS,
                                  *table["slowpoke"])
        client = stack.enter_context(redis_books(config))
        doomed = stack.enter_context(run_gateway(config))
        survivor = stack.enter_context(run_gateway(config))

        async def scenario() -> dict:
            async with client_session() as session:
                settled = await send_chat(session, doomed.base_url)  # billed before the crash
                assert settled.status == 200, settled
                before = wait_books(client, config, lambda b: b.reserved == 0)
                events = [asyncio.Event() for _ in range(STREAMS)]
                texts: list[list[str]] = [[] for _ in range(STREAMS)]
                streams = [asyncio.create_task(hold_stream(session, doomed, e, t))
                           for e, t in zip(events, texts, strict=True)]
                async with asyncio.timeout(15):
                    await asyncio.gather(*(e.wait() for e in events))
                await asyncio.sleep(2)          # renewals record their progress each second
                kill_replica(doomed)
                killed_at = time.monotonic()
                at_kill = read_books(client, config)
                async with asyncio.timeout(15):
                    endings = await asyncio.gather(*streams)
                await asyncio.sleep(max(0.0, killed_at + LEASE_S + 0.5 - time.monotonic()))
                touch = await send_chat(session, survivor.base_url)  # purges expired holds
                freed_after = time.monotonic() - killed_at
                assert touch.status == 200, touch
                final = wait_books(client, config, lambda b: b.reservations == 0)
                return {"settled": settled, "before": before, "at_kill": at_kill,
                        "endings": endings, "touch": touch, "final": final,
                        "texts": ["".join(t) for t in texts], "freed_after": freed_after}

        r = asyncio.run(scenario())
        assert survivor.proc.poll() is None
        ledger = {str(k): int(v) for k, v in client.hgetall(
            f"{{{config['budget']['key_prefix']}:test}}:ledger:"
            f"{time.strftime('%Y-%m-%d', time.gmtime())}").items()}

    before, at_kill, final = r["before"], r["at_kill"], r["final"]
    billed = outcome_cost(r["settled"], table)
    relayed = [counter_for("o200k_base").count_text(t) for t in r["texts"]]
    slow = {k.split("|")[1]: v for k, v in ledger.items() if k.startswith("slowpoke|")}
    print(f"\ncrash: {at_kill.reservations} holds ({at_kill.reserved} nano-USD) at the kill, "
          f"freed {r['freed_after']:.1f} s after it; the clients got {relayed} tokens, "
          f"{slow} billed for them; spend {before.spent_days} before, {final.spent_days} after")
    assert before.spent_days == billed and before.reserved == 0
    assert at_kill.reserved == STREAMS * slow_worst > 0
    assert at_kill.reservations == STREAMS
    assert at_kill.spent_days == billed               # nothing billed yet at the kill
    assert all(e.startswith("cut") for e in r["endings"]), r["endings"]
    assert final.reserved == 0 and final.reservations == 0
    assert r["freed_after"] < LEASE_S + 2
    # Each stream is billed once, its prompt and the tokens its last renewal recorded.
    assert slow["requests"] == STREAMS and slow["input_tokens"] == STREAMS * ours
    assert sum(relayed) - STREAMS * RENEWAL_TOKENS <= slow["output_tokens"] <= sum(relayed)
    assert slow["cost_nanousd"] == cost_nanousd(slow["input_tokens"], slow["output_tokens"],
                                                *table["slowpoke"])
    assert final.spent_days == billed + outcome_cost(r["touch"], table) + slow["cost_nanousd"]
