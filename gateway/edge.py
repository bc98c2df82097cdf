"""The edge: who may call a route and how much body it may send, checked before
a single body byte is read.

    gate = gates.find("POST", "/v1/batches")       # Gate(access=TEAM, max_body=65536)
    await admit(gate, gw, edge, http)              # AuthenticationFailed / RateLimited, or passes
    receive = await bounded_body(gate, http)       # PayloadTooLarge / RequestTimeout, or a receive

FastAPI reads a body parameter before it runs any dependency, so a key
checked in a dependency comes too late: a 300 MB body without a key was read
and parsed first. ``RouteGate`` (``gateway/asgi.py``) therefore runs every
request that is not the chat hot path through here first:

1. ``admit`` checks what the route's ``Access`` asks for (a team key, the
   admin key, the admin key or a ``/ui`` session) from the headers alone. A
   refusal is answered at once with ``connection: close``, so the body is
   never read; the caller or the admin verdict is left in the ASGI scope for
   the route's dependencies (``gateway/deps.py``).
2. ``bounded_body`` reads at most the route's cap: a declared
   ``content-length`` over it is a 413 before reading, a body that grows past
   it is a 413 as soon as it does. Small bodies are read here and handed to
   FastAPI whole; an upload is counted as FastAPI streams it, never buffered.

The door routes do the same in their own code (``serve`` authenticates
before ``read_body``, capped by ``max_body_bytes``). How long a body may take
is the HTTP protocol's business (``gateway/server.py``); when it cuts a slow
body the readers here answer 408 instead of "client gone".

A route missing from ``build_gates`` gets the default: no check here (its
own dependencies still authenticate) and the small cap. A new route that
takes large bodies, or a key, adds a line there.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import cookie_parser

from core.config import GatewayConfig
from gateway.auth import bearer_token
from gateway.exchange import HTTPExchange, Receive, timed_out, too_large
from gateway.guard import AdminGuard
from gateway.readiness import CachedProbe, probe_dependencies
from gateway.sessions import UISessions

if TYPE_CHECKING:
    from gateway.state import AppState

# What the edge leaves in the ASGI scope for the route's dependencies.
CALLER = "routegate.caller"       # the team key's Caller
ADMIN = "routegate.admin"         # True: the admin key or a /ui session was checked
SMALL_BODY = 64 * 1024            # JSON specs, limits, forms: nothing legitimate is bigger
LOGIN_BODY = 4 * 1024             # one form field
FEEDBACK_BODY = 4 * 1024          # a request id and a score
FORM_OVERHEAD = 64 * 1024         # multipart boundaries and fields around an upload
SESSION_COOKIE = "routegate_ui"


class Access(enum.Enum):
    OPEN = "open"
    TEAM = "team"
    ADMIN = "admin"
    ADMIN_OR_SESSION = "admin_or_session"
    METRICS = "metrics"           # ADMIN with metrics.require_admin_key, else OPEN


@dataclass(frozen=True, slots=True)
class Gate:
    access: Access
    max_body: int = SMALL_BODY
    stream: bool = False          # count the body as the route reads it instead of buffering it


@dataclass(frozen=True)
class Gates:
    """Routes by exact (method, path), then by path prefix (a whole segment), else ``default``."""

    exact: dict[tuple[str, str], Gate]
    prefixes: tuple[tuple[str, Gate], ...]
    default: Gate = Gate(Access.OPEN)

    def find(self, method: str, path: str) -> Gate:
        gate = self.exact.get((method, path))
        if gate is not None:
            return gate
        for prefix, gate in self.prefixes:
            if path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] == "/"):
                return gate
        return self.default


def build_gates(config: GatewayConfig) -> Gates:
    team, admin = Gate(Access.TEAM), Gate(Access.ADMIN)
    upload = Gate(Access.TEAM, config.batch.max_file_bytes + FORM_OVERHEAD, stream=True)
    return Gates(
        exact={("POST", "/v1/files"): upload,
               ("POST", "/ui/login"): Gate(Access.OPEN, LOGIN_BODY),
               ("POST", "/ui/logout"): Gate(Access.OPEN, LOGIN_BODY),
               ("GET", "/admin/overview"): Gate(Access.ADMIN_OR_SESSION),
               ("GET", "/admin/history"): Gate(Access.ADMIN_OR_SESSION),
               ("GET", "/metrics"): Gate(Access.METRICS),
               ("POST", "/v1/feedback"): Gate(Access.TEAM, FEEDBACK_BODY)},
        prefixes=(("/v1/files", team), ("/v1/batches", team), ("/v1/models", team),
                  ("/v1/usage", team), ("/v1/responses", team), ("/admin", admin)))


@dataclass
class EdgeState:
    """What the edge keeps between requests; on ``app.state.edge``, made in the lifespan."""

    gates: Gates
    guard: AdminGuard
    sessions: UISessions
    readiness: CachedProbe[tuple[bool, dict[str, bool]]]

    @classmethod
    def start(cls, gw: AppState) -> EdgeState:
        assert gw.redis is not None
        return cls(gates=build_gates(gw.config), guard=AdminGuard(gw.redis.client, gw.config),
                   sessions=UISessions(gw.redis.client, gw.config),
                   readiness=CachedProbe(lambda: probe_dependencies(gw)))


def client_address(scope: Mapping[str, Any]) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def session_id(headers: dict[str, str]) -> str | None:
    cookie = headers.get("cookie")
    return cookie_parser(cookie).get(SESSION_COOKIE) if cookie else None


async def admit(gate: Gate, gw: AppState, edge: EdgeState, http: HTTPExchange) -> None:
    """Check the route's access from the headers; record the verdict in the scope."""
    access = gate.access
    if access is Access.METRICS:
        access = Access.ADMIN if gw.config.metrics.require_admin_key else Access.OPEN
    if access is Access.OPEN:
        return
    if access is Access.TEAM:
        http.scope[CALLER] = gw.keyring.authenticate(http.headers)
        return
    if access is Access.ADMIN_OR_SESSION and await edge.sessions.valid(session_id(http.headers)):
        http.scope[ADMIN] = True
        return
    await edge.guard.check(client_address(http.scope),
                           bearer_token(http.headers.get("authorization")))
    http.scope[ADMIN] = True


def declared_length(headers: dict[str, str]) -> int | None:
    declared = headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


async def bounded_body(gate: Gate, http: HTTPExchange) -> Receive:
    """The ``receive`` to hand the route: its body read (or counted) within the cap."""
    declared = declared_length(http.headers)
    if declared is None and "transfer-encoding" not in http.headers:
        return http.receive                                     # no body
    if declared is not None and declared > gate.max_body:
        raise too_large(gate.max_body, declared)
    if gate.stream:
        return counted(http, gate.max_body)
    return replay(await http.read_body(gate.max_body), http.receive)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the body already read, then the connection's own events."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict[str, Any]:
        return pending.pop() if pending else await receive()

    return replayed


def counted(http: HTTPExchange, limit: int) -> Receive:
    """A ``receive`` that refuses the body as soon as it passes ``limit`` bytes."""
    seen = 0

    async def counting() -> dict[str, Any]:
        nonlocal seen
        message = await http.receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise too_large(limit)
        elif http.body_timed_out():
            raise timed_out()
        return message

    return counting
