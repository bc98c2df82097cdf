"""The warm-prefix record of one replica: which model (and replica) served which prompt
lately, per team, bounded; ``warm.py`` shares it with the other replicas through Redis.

A served prompt is remembered by its chain's last hash (``prompt_prefix.py``); its
head (tools and leading system messages) by ``head_key``, once per model that served
it. Entries older than ``ttl_s`` are not found, and leave at the next ``expire``. Each
team keeps at most ``max_per_team`` entries, least recently served out first, and the
replica ``max_local`` in all, the largest team giving way: one busy team cannot push
another's warm prefixes out.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_LOCAL = 100_000        # prefixes this replica remembers, all teams
MIN_SHARED_TOKENS = 512    # a head shorter than this is not remembered on its own
MAX_PER_TEAM = 20_000      # prefixes a team keeps (here, and in Redis)


@dataclass(frozen=True, slots=True)
class Warm:
    model: str
    replica: int
    tokens: int            # the prompt tokens that request had: what the upstream caches
    at: float = 0.0        # when it was served (wall clock)


class WarmRecord:
    """This replica's record of warm prefixes, per team, bounded (``warm.py`` shares it)."""

    def __init__(self, ttl_s: float, max_local: int = MAX_LOCAL,
                 max_per_team: int = MAX_PER_TEAM) -> None:
        self.ttl_s = ttl_s
        self.max_local = max_local
        self.max_per_team = max_per_team
        # Per team, least recently served first: a busy team's entries push out its own
        # oldest, never another team's (past max_local in all, the largest team's go).
        self._known: dict[str, OrderedDict[bytes, Warm]] = {}
        self._size = 0

    def find(self, team: str, chain: list[bytes]) -> Warm | None:
        """The longest prefix of ``chain`` served within ``ttl_s``, if any."""
        known = self._known.get(team)
        if not known:
            return None
        cutoff = time.time() - self.ttl_s
        for h in reversed(chain):
            warm = known.get(h)
            if warm is not None:
                if warm.at >= cutoff:
                    return warm
                del known[h]
                self._size -= 1
        return None

    def by_model(self, team: str, chain: list[bytes], head: bytes | None = None,
                 models: Iterable[str] = ()) -> dict[str, Warm]:
        """Each model's longest prefix of ``chain`` served within ``ttl_s``: a session that
        moved from one model to another and back finds the first still holding the turns
        it served (its upstream's cache keeps them while they are read). ``head``: the
        chain's hash at its head, looked up for each of ``models`` that served it."""
        out: dict[str, Warm] = {}
        known = self._known.get(team)
        if not known:
            return out
        cutoff = time.time() - self.ttl_s
        for h in reversed(chain):
            warm = known.get(h)
            if warm is not None and warm.at >= cutoff and warm.model not in out:
                out[warm.model] = warm
        if head is not None:
            for model in models:
                warm = known.get(head_key(head, model))
                if warm is not None and warm.at >= cutoff and (
                        model not in out or out[model].tokens < warm.tokens):
                    out[model] = warm
        return out

    def served(self, team: str, chain: list[bytes], head: tuple[bytes, dict[str, int]] | None,
               warm: Warm, encoding: str, whole: bool = True) -> None:
        """``warm``'s model served the prompt ``chain`` hashes: it holds the whole prompt
        (unless not ``whole``: an upstream that caches at breakpoints, where the prompt
        marked none at its end), and its ``head`` (the head's hash and tokens per
        encoding) when that is ``MIN_SHARED_TOKENS`` or more in its model's ``encoding``."""
        if whole:
            self.remember(team, chain[-1], warm)
        if head is not None and (tokens := head[1].get(encoding, 0)) >= MIN_SHARED_TOKENS:
            self.remember(team, head_key(head[0], warm.model),
                          Warm(warm.model, warm.replica, tokens, warm.at))

    def remember(self, team: str, last: bytes, warm: Warm) -> None:
        """``last``: the served request's whole prompt (its chain's last hash)."""
        self._put(team, last, warm)

    def _put(self, team: str, h: bytes, warm: Warm) -> None:
        known = self._known.get(team)
        if known is None:
            known = self._known[team] = OrderedDict()
        self._size += h not in known
        known[h] = warm
        known.move_to_end(h)
        if len(known) > self.max_per_team:
            known.popitem(last=False)
            self._size -= 1
        if self._size > self.max_local:          # rare: many busy teams on one replica
            self._shed()

    def _shed(self) -> None:
        """Back under ``max_local``, and a hundredth of it below, from the largest team:
        one scan of the teams per that many entries, not per entry."""
        while self._size > self.max_local:
            largest = max(self._known.values(), key=len)
            for _ in range(min(len(largest), self._size - self.max_local
                               + self.max_local // 100)):
                largest.popitem(last=False)
                self._size -= 1

    def expire(self) -> None:
        """Drop what was served longer than ``ttl_s`` ago (found lazily otherwise): each
        team's least recently served first, as far as they are stale."""
        cutoff = time.time() - self.ttl_s
        for team, known in list(self._known.items()):
            while known and next(iter(known.values())).at < cutoff:
                known.popitem(last=False)
                self._size -= 1
            if not known:
                del self._known[team]

    def _knows(self, team: str, h: Any, at: float) -> bool:
        """Whether the record already holds ``h`` as served at ``at`` or later."""
        key = h if isinstance(h, bytes) else str(h).encode("latin-1")
        known = self._known.get(team)
        warm = known.get(key) if known else None
        return warm is not None and warm.at >= at


def head_key(h: bytes, model: str) -> bytes:
    """A shared head's key in the record, one per model that served it: its chain hash
    and the model's name (a chain's hashes are 16 bytes, so these are never one)."""
    return h + model.encode()
