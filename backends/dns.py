"""A small DNS cache for the lean transport: one lookup per host per TTL.

    resolver = Resolver(ttl_s=60)
    addresses = await resolver.resolve("vllm.internal", 8000)   # ["10.0.0.7", ...]

Without it every new upstream connection did a blocking ``getaddrinfo`` in
the default executor. IP literals are returned as they are, never looked up.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time


class Resolver:
    __slots__ = ("_ttl_s", "_cache")

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._cache: dict[tuple[str, int], tuple[float, list[str]]] = {}

    async def resolve(self, host: str, port: int) -> list[str]:
        """The host's addresses, in the resolver's order, from the cache while fresh."""
        key = (host, port)
        hit = self._cache.get(key)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            ipaddress.ip_address(host)
            addresses = [host]
            expires = float("inf")
        except ValueError:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM)
            addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
            expires = now + self._ttl_s
        if self._ttl_s > 0 or expires == float("inf"):
            self._cache[key] = (expires, addresses)
        return addresses

    def forget(self, host: str, port: int) -> None:
        """Drop a cached answer (its addresses stopped answering)."""
        self._cache.pop((host, port), None)
