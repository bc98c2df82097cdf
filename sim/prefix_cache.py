"""A server's prefix cache, as vLLM keeps one: blocks of prompt tokens, keyed by all before them.

    cache = PrefixCache(capacity_tokens=65_536)
    blocks = block_hashes(token_ids)          # one hash per full block of 16 tokens
    cached = cache.lookup(blocks, n)          # tokens of the longest prefix held (whole blocks)
    cache.hold(blocks)                        # a running request's blocks: never evicted
    cache.release(blocks)                     # it ended: its blocks stay cached, tail first out

vLLM's automatic prefix caching hashes each full block of ``BLOCK_TOKENS``
tokens together with the hash of the block before it, so a block is found
only when everything before it matches too. A request whose prompt starts
with blocks the server still holds skips their prefill, and its usage
reports them as ``prompt_tokens_details.cached_tokens``.

The cache and the running requests share one KV pool, as in vLLM: a block a
running request holds is counted once however many requests share it, and is
never evicted; a block no request holds stays cached until room is needed,
the least recently released first, and a request's blocks are released tail
first, so its prefix outlives its tail (vLLM's ``free`` in reverse order).
The cache holds at most ``capacity_tokens`` less what the running requests
hold besides (``other_tokens``: their partial blocks and generated tokens).

As vLLM does, the last token is always computed, and a hit is whole blocks: at
most the prompt less one token, rounded down to a block. Counters: tokens asked
for and tokens found (vLLM's ``prefix_cache_queries`` and ``prefix_cache_hits``).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

BLOCK_TOKENS = 16


def block_hashes(token_ids: Sequence[int], block: int = BLOCK_TOKENS) -> list[bytes]:
    """One hash per full block, each over the block and the hash before it."""
    raw = array("Q", token_ids).tobytes()
    step = block * 8
    out: list[bytes] = []
    parent = b""
    for start in range(0, len(raw) - step + 1, step):
        parent = hashlib.blake2b(parent + raw[start:start + step], digest_size=12).digest()
        out.append(parent)
    return out


class PrefixCache:
    def __init__(self, capacity_tokens: int, block: int = BLOCK_TOKENS) -> None:
        self.block = block
        self.capacity_blocks = max(1, capacity_tokens // block)
        self._free: OrderedDict[bytes, None] = OrderedDict()   # cached, held by none: LRU
        self._held: dict[bytes, int] = {}                       # block -> requests holding it
        self.queries = 0        # prompt tokens looked up
        self.hits = 0           # of those, found cached

    def lookup(self, blocks: list[bytes], prompt_tokens: int) -> int:
        """Tokens of the longest cached prefix of ``blocks``: whole blocks, at most the
        prompt less its last token."""
        found = 0
        for h in blocks:
            if h not in self._held and h not in self._free:
                break
            found += 1
        cached = min(found, max(0, prompt_tokens - 1) // self.block) * self.block
        self.queries += prompt_tokens
        self.hits += cached
        return cached

    def hold(self, blocks: list[bytes], other_tokens: int = 0) -> None:
        """A running request holds ``blocks`` (those found, and those it computes)."""
        for h in blocks:
            self._free.pop(h, None)
            self._held[h] = self._held.get(h, 0) + 1
        self._evict(other_tokens)

    def release(self, blocks: list[bytes], other_tokens: int = 0) -> None:
        """The request ended: each block no other request holds stays cached, the tail
        released first so it is evicted first."""
        for h in reversed(blocks):
            n = self._held.get(h, 0) - 1
            if n > 0:
                self._held[h] = n
            elif n == 0:
                del self._held[h]
                self._free[h] = None
        self._evict(other_tokens)

    def _evict(self, other_tokens: int) -> None:
        room = max(0, self.capacity_blocks - -(-max(0, other_tokens) // self.block))
        while self._free and len(self._free) + len(self._held) > room:
            self._free.popitem(last=False)

    @property
    def held_tokens(self) -> int:
        """Tokens in the blocks running requests hold, each block once."""
        return len(self._held) * self.block

    def __len__(self) -> int:
        return (len(self._free) + len(self._held)) * self.block
