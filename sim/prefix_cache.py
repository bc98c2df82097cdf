"""A server's prefix cache, as vLLM keeps one: blocks of prompt tokens, keyed by all before them.

    cache = PrefixCache(capacity_tokens=65_536)
    blocks = block_hashes(token_ids)          # one hash per full block of 16 tokens
    cached = cache.lookup(blocks)             # tokens of the longest prefix held (whole blocks)
    cache.insert(blocks)                      # after the prefill: the prompt's blocks, most recent

vLLM's automatic prefix caching hashes each full block of ``BLOCK_TOKENS``
tokens together with the hash of the block before it, so a block is found
only when everything before it matches too. A request whose prompt starts
with blocks the server still holds skips their prefill, and its usage
reports them as ``prompt_tokens_details.cached_tokens``. The cache holds
``capacity_tokens`` and evicts the least recently used blocks. As vLLM does,
the last token is always computed, so at most the prompt less one token is
ever reported cached. Counters: tokens asked for and tokens found (vLLM's
``prefix_cache_queries`` and ``prefix_cache_hits``).
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
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.queries = 0        # prompt tokens looked up
        self.hits = 0           # of those, found cached

    def lookup(self, blocks: list[bytes], prompt_tokens: int) -> int:
        """Tokens of the longest cached prefix of ``blocks`` (at most the prompt less
        its last token), each block found marked as recently used."""
        found = 0
        for h in blocks:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            found += 1
        cached = min(found * self.block, max(0, prompt_tokens - 1))
        self.queries += prompt_tokens
        self.hits += cached
        return cached

    def insert(self, blocks: list[bytes]) -> None:
        for h in blocks:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def __len__(self) -> int:
        return len(self._blocks) * self.block
