"""Two gateway replicas, one Redis: how soon one finds a warm prefix the other served.

    python -m loadtest.warm_sync                          # about 20 s
    python -m loadtest.warm_sync --sessions 24 --delays 0,0.5,1,2

Each replica shares what it served through Redis off the request path: it
publishes it at most ``PUSH_EVERY_S`` after the answer, and polls for what it
missed every ``POLL_S`` (``gateway/pipeline/warm.py``). This measures it end to end: two
``routegate serve`` processes with the same config and Redis, in front of two
standalone simulators, one per model, each with its own prefix cache:

- ``warm-a`` is the stronger and dearer model (input $1.00 per million,
  cached $0.10); ``warm-b`` the weaker and 10% cheaper one.
- A session's first turn goes to replica A as ``auto:0.9``: only ``warm-a``
  meets that target, so ``warm-a`` serves it and caches the prompt.
- After ``delay`` seconds its second turn (the first, the answer, one more
  line) goes to replica B as plain ``auto`` (the team's target, 0.5, which
  both models meet). Blind to the cache, B picks ``warm-b``, the cheaper; if B
  has learned that ``warm-a`` holds the prompt, ``warm-a`` is cheaper for this
  turn (its cached price) and B stays there.

So the share of second turns B sends to ``warm-a`` is the share in which B
knew of A's turn. The cached tokens are ``warm-a``'s simulator's own count
(its prefix cache), not the gateway's. The row ``same replica`` sends the
second turn to A itself: its own record, at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from loadtest.servers import TEST_KEY, Gateway, hashed, run_gateway, run_simulator

DELAYS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
WORDS = ("cache", "prefix", "replica", "token", "agent", "session", "router", "budget",
         "latency", "model", "prompt", "answer", "tool", "result", "schema", "stream")


def config(sim_a: str, sim_b: str) -> dict[str, Any]:
    """Both replicas' config: two models on their own simulators, one team."""
    def model(name: str, url: str, ability: float, price: float) -> dict[str, Any]:
        return {"name": name, "backend": "openai_compat", "base_url": url,
                "upstream_model": "default", "ability": ability,
                "price": {"input_per_mtok": price, "output_per_mtok": 2 * price,
                          "cached_input_per_mtok": price / 10},
                "context_window": 16384, "max_output_tokens": 512}

    return {
        "models": [model("warm-a", sim_a, 0.97, 1.0), model("warm-b", sim_b, 0.75, 0.9)],
        "teams": [{"name": "test", "keys": [hashed(TEST_KEY)], "quality": 0.5}],
        "redis_url": "redis://127.0.0.1:6379/0",
        "routing": {"cache_aware": True},
        "budget": {"key_prefix": f"rgwarm-{uuid.uuid4().hex[:8]}"},
        "batch": {"key_prefix": f"rgbwarm-{uuid.uuid4().hex[:8]}"},
    }


@contextlib.contextmanager
def two_replicas() -> Iterator[tuple[Gateway, Gateway]]:
    """Replicas A and B of one gateway (one config, one Redis), and their simulators."""
    fast = ("--prefill", "1000000", "--tpot-ms", "1")
    with run_simulator(*fast) as sim_a, run_simulator(*fast) as sim_b:
        cfg = config(sim_a, sim_b)
        with run_gateway(cfg) as a, run_gateway(cfg) as b:
            yield a, b


@dataclass
class Turn:
    model: str
    cached_tokens: int
    prompt_tokens: int


async def ask(client: httpx.AsyncClient, gw: Gateway, model: str,
              messages: list[dict[str, Any]]) -> tuple[Turn, str]:
    resp = await client.post(gw.base_url + "/chat/completions",
                             headers={"authorization": f"Bearer {TEST_KEY}"},
                             json={"model": model, "messages": messages, "max_tokens": 32})
    resp.raise_for_status()
    data = resp.json()
    usage = data["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return (Turn(resp.headers["x-routegate-model"], cached, usage["prompt_tokens"]),
            data["choices"][0]["message"]["content"] or "")


def system_prompt(rng: random.Random, words: int = 1200) -> str:
    """A long system prompt of its own per session (the simulators cache by content)."""
    return f"session {rng.getrandbits(64):x}. " + " ".join(rng.choice(WORDS)
                                                          for _ in range(words))


async def session(client: httpx.AsyncClient, first: Gateway, second: Gateway, delay: float,
                  rng: random.Random) -> tuple[Turn, Turn]:
    """One session's two turns: the first on ``first`` (only warm-a meets its target),
    the second on ``second`` ``delay`` seconds after the first one's answer came back.
    Sessions start at random within a second, so that their turns fall at every
    phase of the replicas' pushes."""
    await asyncio.sleep(rng.uniform(0, 1))
    messages = [{"role": "system", "content": system_prompt(rng)},
                {"role": "user", "content": "Summarise the words above in one line."}]
    one, answer = await ask(client, first, "auto:0.9", messages)
    await asyncio.sleep(delay)
    messages += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": "Now in three words."}]
    two, _ = await ask(client, second, "auto", messages)
    return one, two


async def row(client: httpx.AsyncClient, first: Gateway, second: Gateway, delay: float,
              sessions: int, rng: random.Random) -> dict[str, Any]:
    """``sessions`` sessions at once, their second turns ``delay`` s after their first."""
    turns = await asyncio.gather(*(session(client, first, second, delay, rng)
                                   for _ in range(sessions)))
    firsts = [one for one, _ in turns]
    seconds = [two for _, two in turns]
    warm = [t for t in seconds if t.model == "warm-a"]
    return {"delay_s": delay, "sessions": sessions,
            "first_on_a": sum(t.model == "warm-a" for t in firsts),
            "second_warm": len(warm),
            "second_cached": sum(t.cached_tokens > 0 for t in seconds),
            "cached_share": (sum(t.cached_tokens for t in warm)
                             / max(1, sum(t.prompt_tokens for t in warm)))}


async def measure(a: Gateway, b: Gateway, delays: tuple[float, ...], sessions: int,
                  seed: int = 7) -> list[dict[str, Any]]:
    """The control (second turns on A itself, at once), then one row per delay on B."""
    rng = random.Random(seed)
    async with httpx.AsyncClient(timeout=60) as client:
        rows = [{**await row(client, a, a, 0.0, sessions, rng), "replica": "same (A)"}]
        for delay in delays:
            rows.append({**await row(client, a, b, delay, sessions, rng), "replica": "other (B)"})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=16, help="sessions per delay (<= 64)")
    parser.add_argument("--delays", default=",".join(str(d) for d in DELAYS),
                        help="seconds between a first turn's answer and the second turn (<= 10)")
    args = parser.parse_args(argv)
    delays = tuple(float(d) for d in args.delays.split(","))
    if not 1 <= args.sessions <= 64 or any(not 0 <= d <= 10 for d in delays):
        parser.error("--sessions is 1-64 and each delay 0-10 s")
    started = time.monotonic()
    with two_replicas() as (a, b):
        rows = asyncio.run(measure(a, b, delays, args.sessions))
    print("second turn of each session: routed to the model its first turn warmed "
          "(warm-a), and reported cached by warm-a's simulator")
    print(f"{'second turn on':<16}{'delay s':>8}{'first on a':>12}{'warm':>8}"
          f"{'cached':>8}{'cached share':>14}")
    for r in rows:
        n = r["sessions"]
        print(f"{r['replica']:<16}{r['delay_s']:>8.2f}{r['first_on_a']:>9}/{n:<2}"
              f"{r['second_warm']:>5}/{n:<2}{r['second_cached']:>5}/{n:<2}"
              f"{r['cached_share']:>14.3f}")
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
