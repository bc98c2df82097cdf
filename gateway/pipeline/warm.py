"""Warm prefixes: which model (and replica) probably still holds a conversation's prefix cached.

    chain = prefix_chain(req.body)                 # prompt_prefix.py: a hash per message
    warm = gw.warm.find(team, chain)               # the longest prefix served before, or None
    per_model = gw.warm.by_model(team, chain, chain[k - 1], models)   # each model's longest
    ...                                            # the router prices it: cached tokens, less prefill
    gw.warm.served(team, chain, (chain[k - 1], {"o200k_base": 1800}),   # k = head_length
                   Warm("medium", 0, 2400), "o200k_base")   # the prompt, and its head

An agent's session is a prompt that grows every turn: the system prompt, the
tools, then every tool result so far. The upstream that served the last turn
holds that whole prompt in its prefix cache (vLLM, SGLang, llama.cpp, and the
providers' prompt caching) and reads it back at a fraction of the price and
none of the prefill. Each request's prompt is hashed as a chain over its
messages (``prompt_prefix.py``), so a turn that appends to an earlier prompt
contains that prompt's hash in its own chain. The last hash of each served request is
remembered with the model and replica that served it and its prompt tokens.
So is the hash of its head (the tools and the leading system messages, when
they are ``MIN_SHARED_TOKENS`` or more and something follows them): the
sessions of one agent share it, and the upstream's prefix cache serves a new
session's head from an earlier one's (vLLM's and OpenAI's automatic caching,
Anthropic's breakpoint on the system prompt), so a new session is priced warm
where a session with that head was served. A head is kept once per model that
served it (``head_key``): the sessions of one agent go to different models by
what their tasks need, and each of those models still caches the head.

The record is kept in this replica's memory (``warm_record.py``: bounded per team,
least recently used first out, ``ttl_s`` near the upstream's cache lifetime) and shared through
Redis off the request path, so that a session whose turns land on different
gateway replicas still finds its warm model:

- **pushed**: what a replica served is written and PUBLISHed at most
  ``PUSH_EVERY_S`` after the answer (one round trip for all its teams), and
  every replica's subscription takes it in as it arrives: an agent's next
  turn, sent as soon as its tool has run, finds it on any replica;
- **polled**: every ``POLL_S`` each replica reads what was written since its
  last read, for what a subscription missed (pub/sub delivers at most once: a
  reconnect, a replica started later, a lost message), and trims the record.

The request path itself makes no Redis call for it (``remember`` only sets an
event).

Redis, per team (T = the budget's hash tag): ``T:warm`` HASH hash -> "model|replica|
tokens|at" and ``T:warm:at`` ZSET hash -> at (s), trimmed to ``ttl_s`` and
``MAX_PER_TEAM`` entries. The channel ``<key_prefix>:warm`` carries
``{"from": replica id, "entries": [[team, hash hex, model, replica, tokens, at], ...]}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from redis.asyncio import RedisCluster

from gateway.pipeline.warm_record import (
    MAX_LOCAL,
    MAX_PER_TEAM,
    MIN_SHARED_TOKENS,
    Warm,
    WarmRecord,
    head_key,
)

log = logging.getLogger("routegate.warm")

PUSH_EVERY_S = 0.05        # at most one write-and-publish per this: a busy replica's batch
POLL_S = 2.0               # the catch-up read and the trim
# An entry is stamped with when it was served and reaches Redis a push later (replicas'
# clocks differ a little too): a read that began after the newest entry it had seen would
# miss another replica's older ones written since. So each read goes back this far before
# that; what it already knows is skipped.
READ_OVERLAP_S = 2.0
MAX_MESSAGE_BYTES = 8 << 20   # a published batch past this is not read (its poll catches up)
RETRY_S = 1.0              # a lost subscription is taken up again after this
# In a cluster a PUBLISH reaches every node from any node: each try goes to a node drawn
# anew, not the client's default node, which stayed on a failed-over node for good.
_ANY_NODE = {"target_nodes": RedisCluster.RANDOM}


class WarmPrefixes(WarmRecord):
    """The record (``warm_record.py``), shared with the other replicas through Redis."""

    def __init__(self, ttl_s: float, max_local: int = MAX_LOCAL,
                 max_per_team: int = MAX_PER_TEAM) -> None:
        super().__init__(ttl_s, max_local, max_per_team)
        self._pending: dict[str, dict[bytes, Warm]] = {}    # team -> to write and publish
        self._unwritten: dict[str, dict[bytes, Warm]] = {}  # a failed write's: to write again
        self._seen_at: dict[str, float] = {}                 # team -> newest read from Redis
        self._written: set[str] = set()                      # teams to trim at the next poll
        self._wake = asyncio.Event()                         # something is pending

    def remember(self, team: str, last: bytes, warm: Warm) -> None:
        super().remember(team, last, warm)
        self._pending.setdefault(team, {})[last] = warm
        self._wake.set()

    async def run(self, redis: Any, tag_of: Any, teams: Callable[[], frozenset[str]],
                  channel: str, subscriber: Any, origin: str) -> None:
        """Background task: share the record through Redis (``tag_of(team)``: its hash tag;
        ``teams()``: the teams served now, read at each message and poll, so a team a
        config reload adds is shared too; ``subscriber()``: a client of its own for the
        subscription; ``origin``: this replica's id, whose own messages it skips)."""
        await asyncio.gather(self._push(redis, tag_of, channel, origin),
                             self._listen(subscriber, channel, teams, origin),
                             self._poll(redis, tag_of, teams))

    async def _push(self, redis: Any, tag_of: Any, channel: str, origin: str) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.write(redis, tag_of, channel, origin)
            except Exception as exc:      # Redis away: the local record goes on alone
                log.debug("warm prefixes: write failed (%r)", exc)
                self._wake.set()          # its entries wait in _unwritten: retried
                await asyncio.sleep(RETRY_S)
            await asyncio.sleep(PUSH_EVERY_S)

    async def _listen(self, subscriber: Any, channel: str,
                      teams: Callable[[], frozenset[str]], origin: str) -> None:
        while True:
            try:
                client = subscriber()
                try:
                    async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                        await pubsub.subscribe(channel)
                        while True:
                            message = await pubsub.get_message(timeout=RETRY_S)
                            if message is not None:
                                self.take(message.get("data"), teams(), origin)
                finally:
                    await client.aclose()
            except Exception as exc:      # the poll catches up meanwhile
                log.debug("warm prefixes: subscription lost (%r)", exc)
            await asyncio.sleep(RETRY_S)

    async def _poll(self, redis: Any, tag_of: Any,
                    teams: Callable[[], frozenset[str]]) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            self.expire()
            try:
                if names := sorted(teams()):
                    await self.read(redis, tag_of, names)
                await self.trim(redis, tag_of)
            except Exception as exc:
                log.debug("warm prefixes: poll failed (%r)", exc)

    async def write(self, redis: Any, tag_of: Any, channel: str | None = None,
                    origin: str = "") -> None:
        """Write what this replica served since the last write (and what a failed write
        left), and publish what is new. The publish does not wait on the write: a cluster
        node down for a team's slot stops that write, not the others' news."""
        fresh, self._pending = self._pending, {}
        todo, self._unwritten = _merged(self._unwritten, fresh, time.time() - self.ttl_s), {}
        error: Exception | None = None
        if todo:
            try:
                async with redis.pipeline(transaction=False) as pipe:
                    for team, entries in todo.items():
                        tag = tag_of(team)
                        pipe.hset(f"{tag}:warm", mapping={
                            h: f"{w.model}|{w.replica}|{w.tokens}|{w.at}"
                            for h, w in entries.items()})
                        pipe.zadd(f"{tag}:warm:at", {h: w.at for h, w in entries.items()})
                        for key in (f"{tag}:warm", f"{tag}:warm:at"):
                            pipe.expire(key, int(self.ttl_s) + 60)
                    await pipe.execute()
                self._written.update(todo)
            except Exception as exc:          # kept for the next write, bounded
                self._unwritten = _merged(todo, self._unwritten, time.time() - self.ttl_s)
                error = exc
        if channel is not None and fresh:   # not in the pipeline: a cluster's refuses PUBLISH
            try:
                await redis.publish(channel, orjson.dumps({"from": origin, "entries": [
                    (team, h.hex(), w.model, w.replica, w.tokens, w.at)
                    for team, entries in fresh.items() for h, w in entries.items()]}),
                    **_ANY_NODE if isinstance(redis, RedisCluster) else {})
            except Exception:                 # published with the next write's news
                self._pending = _merged(fresh, self._pending, time.time() - self.ttl_s)
                raise
        if error is not None:
            raise error

    def take(self, data: Any, teams: frozenset[str], origin: str) -> int:
        """Take in another replica's published entries; how many were new."""
        if not isinstance(data, bytes | str) or len(data) > MAX_MESSAGE_BYTES:
            return 0
        try:
            message = orjson.loads(data)
            entries = message["entries"] if message["from"] != origin else []
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return 0
        cutoff, new = time.time() - self.ttl_s, 0
        for entry in entries if isinstance(entries, list) else ():
            try:
                team, h, model, replica, tokens, at = entry
                warm = Warm(str(model), int(replica), int(tokens), float(at))
                key = bytes.fromhex(h)
            except (TypeError, ValueError):
                continue
            if (isinstance(team, str) and team in teams and warm.at >= cutoff
                    and not self._knows(team, key, warm.at)):
                self._put(team, key, warm)
                new += 1
        return new

    async def read(self, redis: Any, tag_of: Any, teams: list[str]) -> None:
        """Read what was written since the last read (less ``READ_OVERLAP_S``)."""
        now = time.time()
        async with redis.pipeline(transaction=False) as pipe:
            for team in teams:
                tag = tag_of(team)
                since = max(self._seen_at.get(team, 0.0) - READ_OVERLAP_S, now - self.ttl_s)
                # Newest first: a team past MAX_PER_TEAM in the window loses its oldest
                # entries, never the read's progress.
                pipe.zrevrangebyscore(f"{tag}:warm:at", "+inf", f"({since}", start=0,
                                      num=MAX_PER_TEAM, withscores=True)
            replies = await pipe.execute()
        await self._take(redis, tag_of, teams, replies, now)

    async def _take(self, redis: Any, tag_of: Any, teams: list[str], fresh: list[Any],
                    now: float) -> None:
        wanted = [(team, [h for h, at in rows if not self._knows(team, h, float(at))])
                  for team, rows in zip(teams, fresh, strict=True)]
        for team, rows in zip(teams, fresh, strict=True):
            if rows:      # never past this replica's own clock: a writer's running fast
                # would move the next read past every entry the others write meanwhile
                self._seen_at[team] = max(self._seen_at.get(team, 0.0),
                                          min(now, max(float(at) for _, at in rows)))
        if not any(hashes for _, hashes in wanted):
            return
        async with redis.pipeline(transaction=False) as pipe:
            for team, hashes in wanted:
                if hashes:
                    pipe.hmget(f"{tag_of(team)}:warm", hashes)
            values = await pipe.execute()
        for (team, hashes), got in zip([w for w in wanted if w[1]], values, strict=True):
            for h, raw in zip(hashes, got, strict=True):
                warm = _parse(raw)
                if warm is not None and warm.at >= now - self.ttl_s:
                    self._put(team, h if isinstance(h, bytes) else h.encode("latin-1"), warm)

    async def trim(self, redis: Any, tag_of: Any) -> None:
        """Keep the record of each team written since the last trim within ``ttl_s`` and
        ``MAX_PER_TEAM`` entries."""
        teams, self._written = list(self._written), set()
        if not teams:
            return
        now = time.time()
        async with redis.pipeline(transaction=False) as pipe:
            for team in teams:
                tag = tag_of(team)
                pipe.zrangebyscore(f"{tag}:warm:at", "-inf", now - self.ttl_s)
                pipe.zrange(f"{tag}:warm:at", 0, -MAX_PER_TEAM - 1)
            replies = await pipe.execute()
        async with redis.pipeline(transaction=False) as pipe:
            for i, team in enumerate(teams):
                tag = tag_of(team)
                gone = set(replies[2 * i]) | set(replies[2 * i + 1])
                if gone:
                    pipe.zrem(f"{tag}:warm:at", *gone)
                    pipe.hdel(f"{tag}:warm", *gone)
            await pipe.execute()


def _merged(old: dict[str, dict[bytes, Warm]], new: dict[str, dict[bytes, Warm]],
            cutoff: float) -> dict[str, dict[bytes, Warm]]:
    """``old`` under ``new`` (new wins), per team the newest ``MAX_PER_TEAM`` served from
    ``cutoff`` on: Redis away for a while keeps the newest, never an ever longer queue."""
    out = {}
    for team in old.keys() | new.keys():
        entries = {h: w for h, w in old.get(team, {}).items() if w.at >= cutoff}
        entries.update(new.get(team, {}))
        if len(entries) > MAX_PER_TEAM:
            entries = dict(sorted(entries.items(), key=lambda kv: kv[1].at)[-MAX_PER_TEAM:])
        if entries:
            out[team] = entries
    return out


def _parse(raw: Any) -> Warm | None:
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        model, replica, tokens, at = text.split("|")
        return Warm(model, int(replica), int(tokens), float(at))
    except ValueError:
        return None


__all__ = ["MIN_SHARED_TOKENS", "MAX_PER_TEAM", "Warm", "WarmPrefixes", "head_key"]
