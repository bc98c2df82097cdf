"""Opening the Redis the budget store runs on.

    handle = await open_redis(config.redis_url, Path(config.data_dir))
    app.state.budget = BudgetStore(handle.client, config.budget, ...)
    ...
    await handle.close()

``url`` selects the mode:

* ``None``: the embedded server (``embedded.py``), shared by every gateway
  process on this data_dir;
* ``redis://host:6379/0``, ``rediss://...`` (TLS), ``unix:///path.sock``: one
  Redis (or a Sentinel/proxy endpoint that looks like one);
* ``redis+cluster://host:7000`` / ``rediss+cluster://...``, or any of the above
  with ``?cluster=true``: a Redis Cluster, through ``redis.asyncio.RedisCluster``
  (every budget key of a team shares one hash tag, so the scripts run there).

Timeouts are short and the client retries only a dropped connection, once:
the store decides what a failure means (fail_closed / fail_open, journalling),
and a hung Redis must cost a request at most about a second, never a hang.
Both scripts are safe to retry (reserve and settle are idempotent by request id).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import count
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError

from budget.embedded import EmbeddedLease, start_embedded
from budget.pipelined import PipelinedRedis

# The connect timeout covers the handshake too, measured on a possibly busy
# event loop: at 0.5 s a cold burst of connects already timed out.
log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 1.0
SOCKET_TIMEOUT_S = 1.0
# Beyond this many calls in flight, callers queue for a connection instead of
# opening ever more sockets to a busy Redis. The wait has no bound of its own:
# it is local queueing, not an unreachable Redis, and the store's per-call
# deadline (store.CALL_TIMEOUT_S) bounds it. A separate 1 s bound expired under
# a burst of a few hundred requests per replica while Redis was healthy, and
# the store then refused every request of the replica for a second (503).
MAX_CONNECTIONS = 64
POOL_WAIT_S = None
# The async cluster client has no waiting pool: it fails when a node's pool
# is full, so its cap is set high enough never to be the limit.
CLUSTER_MAX_CONNECTIONS_PER_NODE = 1024


def _single(url: str) -> Redis:
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=POOL_WAIT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=SOCKET_TIMEOUT_S,
        # One immediate retry on a dropped connection, never on a timeout: after
        # a Redis restart the pool still hands out connections to the dead
        # server ("Connection closed by server"), and without a retry each one
        # fails a request and makes the store skip Redis for its back-off.
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )
    return Redis.from_pool(pool)


async def _cluster(url: str) -> RedisCluster:
    cluster = RedisCluster.from_url(
        url,
        max_connections=CLUSTER_MAX_CONNECTIONS_PER_NODE,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=SOCKET_TIMEOUT_S,
        retry=Retry(NoBackoff(), 1),  # one retry follows a slot move after failover
    )
    # Learn the slot map now: redis-py's lazy first-use initialisation races
    # under a burst of concurrent first commands and drops some of them. If
    # the cluster is down, start anyway (the fail policy applies) and let the
    # client initialise on first use.
    try:
        await cluster.initialize()
    except (RedisError, RedisClusterException, OSError) as exc:
        log.warning("budget: Redis Cluster not reachable at start-up: %r", exc)
    return cluster


@dataclass
class RedisHandle:
    """The client, plus whatever must be released with it (the embedded lease)."""

    client: Any  # redis.asyncio.Redis | redis.asyncio.RedisCluster
    cluster: bool = False
    # The server's address without cluster markers (a unix socket for the
    # embedded one), for the components with a synchronous client of their own.
    url: str = ""
    embedded: EmbeddedLease | None = None
    # What the request path's scripts run on: the lean pipelined client for a
    # single Redis, the cluster client for a cluster.
    scripts: Any = None

    def __post_init__(self) -> None:
        if self.scripts is None:
            self.scripts = self.client

    async def close(self) -> None:
        try:
            if self.scripts is not self.client:
                await self.scripts.aclose()
            await self.client.aclose()
        finally:
            if self.embedded is not None:
                self.embedded.release()


def cluster_url(url: str) -> tuple[str, bool]:
    """Strip the cluster markers from ``url``; return it and whether it names a cluster."""
    parts = urlsplit(url)
    scheme = parts.scheme
    query = parse_qsl(parts.query, keep_blank_values=True)
    flags = [v for k, v in query if k == "cluster"]
    is_cluster = scheme.endswith("+cluster") or any(v.lower() in ("1", "true", "yes") for v in flags)
    scheme = scheme.removesuffix("+cluster")
    rest = urlencode([(k, v) for k, v in query if k != "cluster"])
    return urlunsplit((scheme, parts.netloc, parts.path, rest, parts.fragment)), is_cluster


async def open_redis(url: str | None, data_dir: Path) -> RedisHandle:
    """Connect to ``url`` (see the module docstring), or start the embedded server."""
    if url is None:
        lease = await start_embedded(data_dir)
        url = f"unix://{lease.socket}"
        return RedisHandle(_single(url), embedded=lease, scripts=PipelinedRedis(url), url=url)
    plain, is_cluster = cluster_url(url)
    if is_cluster:
        return RedisHandle(await _cluster(plain), cluster=True, url=plain)
    # No round trip here either: a Redis that is down at start-up is handled
    # like one that goes down later.
    return RedisHandle(_single(plain), scripts=PipelinedRedis(plain), url=plain)


def subscriber(url: str) -> Redis:
    """A client of its own for one subscription (``url``: ``RedisHandle.url``). A pub/sub
    connection is held for as long as it listens and waits on it past a command's
    timeout, so it comes from no shared pool; a ping every ``SUBSCRIBER_PING_S`` finds a
    server that went away in silence."""
    return Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S,
                          health_check_interval=SUBSCRIBER_PING_S)


def subscribers(handle: RedisHandle) -> Callable[[], Redis]:
    """Where each (re)subscription goes: ``subscriber(handle.url)`` on one server. In a
    cluster a PUBLISH reaches every node, so any node serves: the first call takes the
    node the url names, and each later one the next node the cluster client knows then,
    so a subscription lost with its node (a failover) is taken up on another."""
    if not handle.cluster:
        return partial(subscriber, handle.url)
    calls = count()

    def next_node() -> Redis:
        n = next(calls)
        nodes = sorted((node.host, node.port) for node in handle.client.get_nodes())
        if n == 0 or not nodes:
            return subscriber(handle.url)
        host, port = nodes[n % len(nodes)]
        parts = urlsplit(handle.url)
        auth = parts.netloc.rpartition("@")[0]
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return subscriber(urlunsplit((parts.scheme, f"{auth}@{where}" if auth else where,
                                      parts.path, parts.query, parts.fragment)))
    return next_node


SUBSCRIBER_PING_S = 10

# A synchronous client moves whole blob chunks (a MiB), from worker threads.
SYNC_SOCKET_TIMEOUT_S = 10.0


def sync_redis(url: str, cluster: bool) -> Any:
    """A synchronous client to the same server, for code that runs in threads
    (``batch/blob_redis.py``): never on the event loop."""
    from redis import Redis as SyncRedis
    from redis.cluster import RedisCluster as SyncCluster

    options: dict[str, Any] = {"socket_connect_timeout": CONNECT_TIMEOUT_S,
                               "socket_timeout": SYNC_SOCKET_TIMEOUT_S}
    if cluster:
        return SyncCluster.from_url(url, **options)
    return SyncRedis.from_url(url, **options)
