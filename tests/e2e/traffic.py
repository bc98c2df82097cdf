"""Client side of the end-to-end budget tests: send chats, price them, read Redis.

    async with client_session() as session:
        outcome = await send_chat(session, gw.base_url, model="fast", stream=True)
    expected = sum(outcome_cost(o, prices(config)) for o in outcomes if o.status == 200)
    books = read_books(redis_client, config, team="test")   # what Redis recorded
    assert books.spent_total == expected

Every call has a timeout: a hang is a failure (status 0), never a stuck test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import redis

from budget.keys import KeySpace
from budget.nanousd import cost_nanousd
from tests.support import TEST_KEY

SHARED_REDIS = "redis://127.0.0.1:6379/0"
HELLO = [{"role": "user", "content": "Say hello to the budget tests."}]


@dataclass
class Outcome:
    """What the client saw of one request; status 0 means no HTTP answer at all."""

    model: str
    stream: bool
    status: int = 0
    usage: dict[str, int] | None = None
    error: dict[str, Any] | None = None  # error object of the body, or of an in-stream event
    failure: str | None = None  # transport failure or timeout (status 0)
    started: float = 0.0  # time.time() when sent
    answered: float = 0.0  # when the response headers arrived
    ended: float = 0.0


@contextlib.asynccontextmanager
async def client_session(connections: int = 0) -> AsyncIterator[aiohttp.ClientSession]:
    """An aiohttp session; ``connections=0`` means no connection limit."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


def parse_sse(raw: bytes) -> list[dict[str, Any]]:
    events = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            events.append(json.loads(line[6:]))
    return events


async def send_chat(
    session: aiohttp.ClientSession,
    base_url: str,
    *,
    model: str = "fast",
    stream: bool = False,
    max_tokens: int = 30,
    messages: list[dict[str, str]] = HELLO,
    timeout_s: float = 30.0,
    api_key: str = TEST_KEY,
) -> Outcome:
    """One chat completion; streams ask for the usage chunk, as a billing client would."""
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                            "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    headers = {"authorization": f"Bearer {api_key}", "x-request-id": f"e2e-{uuid.uuid4().hex}"}
    out = Outcome(model, stream, started=time.time())
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(base_url + "/chat/completions", json=body,
                                    headers=headers) as resp:
                out.status, out.answered = resp.status, time.time()
                raw = await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        out.status, out.failure = 0, repr(exc)
        out.ended = time.time()
        return out
    out.ended = time.time()
    _read_body(out, raw)
    return out


def _read_body(out: Outcome, raw: bytes) -> None:
    try:
        if out.status == 200 and out.stream:
            for event in parse_sse(raw):
                if event.get("error"):
                    out.error = event["error"]
                if event.get("usage"):
                    out.usage = event["usage"]
            return
        doc = json.loads(raw)
    except ValueError:
        out.failure = f"unparseable body: {raw[:200]!r}"
        return
    if out.status == 200:
        out.usage = doc.get("usage")
    else:
        out.error = doc.get("error") if isinstance(doc, dict) else None


def prices(config: dict) -> dict[str, tuple[float, float]]:
    """model name -> (input, output) USD per million tokens, from a gateway config dict."""
    return {m["name"]: (m["price"]["input_per_mtok"], m["price"]["output_per_mtok"])
            for m in config["models"]}


def outcome_cost(out: Outcome, table: dict[str, tuple[float, float]]) -> int:
    """The nano-USD the gateway must bill for a successful response, from its usage."""
    assert out.usage is not None, out
    return cost_nanousd(out.usage["prompt_tokens"], out.usage["completion_tokens"],
                        *table[out.model])


def is_quota_error(out: Outcome) -> bool:
    err = out.error or {}
    return (out.status == 429 and err.get("type") == "insufficient_quota"
            and err.get("code") == "insufficient_quota" and bool(err.get("message")))


@dataclass
class Books:
    """What Redis holds for one team, summed over every window that exists."""

    days: dict[str, int] = field(default_factory=dict)  # "2026-11-29" -> spent nano-USD
    months: dict[str, int] = field(default_factory=dict)
    reserved: int = 0
    reservations: int = 0  # entries in T:res
    ledger_requests: int = 0
    ledger_cost: int = 0

    @property
    def spent_days(self) -> int:
        return sum(self.days.values())

    @property
    def spent_months(self) -> int:
        return sum(self.months.values())


def keyspace(config: dict) -> KeySpace:
    budget = config["budget"]
    return KeySpace(budget["key_prefix"], budget.get("timezone", "UTC"))


def read_books(client: redis.Redis, config: dict, team: str = "test") -> Books:
    """One consistent snapshot of the team's books.

    The values are read in a single MULTI/EXEC, so a settle landing half-way
    through cannot show its month but not its day; the key scan is repeated
    until no window or ledger key appeared in between.
    """
    tag = keyspace(config).tag(team)
    while True:
        keys = _book_keys(client, tag)
        pipe = client.pipeline(transaction=True)
        for key in keys:
            if key.rsplit(":", 2)[-2] == "ledger":
                pipe.hgetall(key)
            else:
                pipe.hget(key, "team")
        pipe.hget(f"{tag}:reserved", "team")
        pipe.hlen(f"{tag}:res")
        values = pipe.execute()
        if _book_keys(client, tag) == keys:
            break
    books = Books()
    for key, value in zip(keys, values[:-2], strict=True):
        kind, name = key.rsplit(":", 2)[-2:]
        if kind == "ledger":
            for raw, amount in value.items():
                fld = raw if isinstance(raw, str) else raw.decode()
                if fld.endswith("|requests"):
                    books.ledger_requests += int(amount)
                elif fld.endswith("|cost_nanousd"):
                    books.ledger_cost += int(amount)
        else:
            (books.days if kind == "d" else books.months)[name] = int(value or 0)
    books.reserved = int(values[-2] or 0)
    books.reservations = int(values[-1])
    return books


def _book_keys(client: redis.Redis, tag: str) -> list[str]:
    keys: set[str] = set()
    for kind in ("d", "m", "ledger"):
        keys.update(k if isinstance(k, str) else k.decode()
                    for k in client.scan_iter(match=f"{tag}:{kind}:*", count=1000))
    return sorted(keys)


def wait_books(client: redis.Redis, config: dict, done: Any, timeout_s: float = 15.0,
               team: str = "test") -> Books:
    """Poll Redis until ``done(books)``; return the last books either way.

    Streams settle in the relay's ``finally``, just after the client read the
    last byte, and fail-open spend lands when the reconciler replays it.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        books = read_books(client, config, team)
        if done(books) or time.monotonic() > deadline:
            return books
        time.sleep(0.05)


@contextlib.contextmanager
def redis_books(config: dict, url: str = SHARED_REDIS) -> Iterator[redis.Redis]:
    """A sync client on the budget Redis; deletes the test's keys afterwards."""
    client = redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)
    try:
        yield client
    finally:
        prefix = config["budget"]["key_prefix"]
        try:
            keys = list(client.scan_iter(match="{" + prefix + ":*", count=1000))
            if keys:
                client.delete(*keys)
        except redis.RedisError:
            pass
        client.close()
