"""Which replica of a model serves a request: prefix affinity with bounded load.

    ring = PrefixAffinity(3)                     # one model, three base_urls
    i = ring.pick(payload["messages"])           # same long prefix -> same replica
    ...                                          # the call runs on origins[i]
    ring.release(i)

An inference server keeps the KV cache of prompts it has seen (vLLM's
prefix caching, llama.cpp's slots); a request whose prompt starts like an
earlier one prefills only the new part, if it reaches the same replica. So
requests are placed by consistent hashing of their prompt's first
``prefix_chars`` characters (the system prompt and the first user turn):
each replica owns ``vnodes`` points on a ring, and a key goes to the first
point clockwise from its hash.

Hashing alone would pile a hot prefix onto one replica. With bounded loads
(Mirrokni, Thorup and Zadimoghaddam, "Consistent Hashing with Bounded
Loads", SODA 2018) no replica takes more than ``ceil(load_factor × (in
flight + 1) / replicas)`` requests: a full one passes the key on clockwise,
to the next replica on the ring, so a hot prefix spills to the same second
replica every time, which keeps that one's cache warm too.

Prompts shorter than ``min_chars`` share no prefix worth keeping: they go to
the least-loaded replica. In-flight counts are this process's own.

A replica that refuses a connection (stopped, restarting, its address gone) is
skipped for ``DOWN_S`` by every placement, the warm one included, and the
request is sent to the next replica at once (``send``): nothing reached the
dead one, so nothing is billed twice, and the model stays available on the
replicas that are up. Once every replica has refused, the error goes up to the
model's breaker and fallback as before.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, TypeVar

import orjson

from backends.transport import ConnectError

T = TypeVar("T")

VNODES = 64
LOAD_FACTOR = 1.25          # the paper's 1 + epsilon; 1.25 keeps most keys at home
PREFIX_CHARS = 2048
MIN_CHARS = 256
DOWN_S = 5.0                # a replica that refused a connection is skipped this long
NONE: frozenset[int] = frozenset()


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def prefix_key(messages: Sequence[Any], chars: int = PREFIX_CHARS) -> bytes:
    """The first ``chars`` characters of the prompt as sent: roles and contents
    in order, so a shared system prompt and first turn give the same key."""
    parts: list[str] = []
    size = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        piece = f"{message.get('role')}:{text}\n"
        parts.append(piece)
        size += len(piece)
        if size >= chars:
            break
    return "".join(parts)[:chars].encode("utf-8", "surrogatepass")


class PrefixAffinity:
    def __init__(self, replicas: int, *, vnodes: int = VNODES, load_factor: float = LOAD_FACTOR,
                 prefix_chars: int = PREFIX_CHARS, min_chars: int = MIN_CHARS) -> None:
        self.replicas = replicas
        self.load_factor = load_factor
        self.prefix_chars = prefix_chars
        self.min_chars = min_chars
        self.in_flight = [0] * replicas
        self.down_until = [0.0] * replicas     # time.monotonic() until which it is skipped
        points = sorted((_hash(b"%d-%d" % (r, v)), r) for r in range(replicas)
                        for v in range(vnodes))
        self._points = [p for p, _ in points]
        self._owners = [r for _, r in points]

    def bound(self, skipped: int = 0) -> int:
        """The most requests one replica may hold once one more is placed (on the
        replicas not ``skipped``)."""
        return math.ceil(self.load_factor * (sum(self.in_flight) + 1)
                         / max(1, self.replicas - skipped))

    def home(self, key: bytes) -> int:
        """The replica ``key`` hashes to, load aside."""
        i = bisect.bisect(self._points, _hash(key)) % len(self._points)
        return self._owners[i]

    def place(self, key: bytes, skip: Collection[int] = NONE) -> int:
        """The first replica clockwise from ``key`` that is under the load bound."""
        bound = self.bound(len(skip))
        start = bisect.bisect(self._points, _hash(key))
        n = len(self._points)
        for step in range(n):
            owner = self._owners[(start + step) % n]
            if self.in_flight[owner] < bound and owner not in skip:
                return owner
        return self.least_loaded(skip)   # unreachable: some replica is always under the bound

    def least_loaded(self, skip: Collection[int] = NONE) -> int:
        return min((r for r in range(self.replicas) if r not in skip),
                   key=self.in_flight.__getitem__)

    def skipped(self, tried: Collection[int] = NONE) -> Collection[int]:
        """The replicas a placement passes over: those down, and those ``tried`` already;
        when that is every replica, only those tried (a down mark may be stale)."""
        now = time.monotonic()
        down = [r for r, until in enumerate(self.down_until) if until > now]
        if not down:
            return tried
        skip = {*down, *tried}
        return skip if len(skip) < self.replicas else tried

    def pick(self, messages: Any, preferred: int | None = None,
             tried: Collection[int] = NONE) -> int:
        """Choose a replica for a request and count it in flight there: ``preferred`` (the
        one that served this conversation's prefix last) while it is up and under the load
        bound, else by the ring, passing over the replicas down or ``tried``."""
        if self.replicas == 1:
            i = 0
        else:
            skip = self.skipped(tried)
            if preferred is not None and 0 <= preferred < self.replicas and (
                    preferred not in skip and self.in_flight[preferred] < self.bound(len(skip))):
                i = preferred
            else:
                key = prefix_key(messages, self.prefix_chars) if isinstance(messages, list) \
                    else b""
                i = self.place(key, skip) if len(key) >= self.min_chars \
                    else self.least_loaded(skip)
        self.in_flight[i] += 1
        return i

    def release(self, i: int) -> None:
        self.in_flight[i] -= 1

    def down(self, i: int) -> None:
        self.down_until[i] = time.monotonic() + DOWN_S

    async def send(self, messages: Any, preferred: int | None,
                   request: Callable[[int], Awaitable[T]]) -> tuple[T, int]:
        """``request(replica)`` on a replica picked for ``messages``: the answer and the
        replica, counted in flight there until the caller releases it. A refused
        connection marks that replica down and tries the next, until each has been tried;
        on any failure raised, nothing is left counted."""
        tried: list[int] = []
        while True:
            i = self.pick(messages, preferred, tried)
            try:
                return await request(i), i
            except ConnectError:
                self.release(i)
                if self.replicas > 1:
                    self.down(i)
                tried.append(i)
                if len(tried) >= self.replicas:
                    raise
            except BaseException:
                self.release(i)
                raise
