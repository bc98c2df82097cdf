"""``POST`` to a protocol's endpoint: HTTP in, HTTP out; the request itself is the pipeline's.

    ROUTES["/v1/chat/completions"](http)   # -> serve(gw, gw.doors[path], http, headers, read_body)

Served in plain ASGI (``gateway.asgi``): these routes carry nearly all the
traffic. Each path is one door (``gateway/protocols/``), built with the app
state; ``gateway.pipeline.serve.serve`` does the rest, and settles after the
last byte went out, so the client never waits for it.
"""

from __future__ import annotations

from gateway.exchange import Handler, HTTPExchange
from gateway.pipeline.serve import serve
from gateway.protocols import DOOR_PATHS
from gateway.state import AppState


def door_route(path: str) -> Handler:
    async def handle(http: HTTPExchange) -> None:
        gw: AppState = http.app.state.gw
        door = gw.doors[path]

        async def read_body() -> bytes:
            return await http.read_body(gw.switches.max_body_bytes)

        try:
            await serve(gw, door, http, http.headers, read_body)
        finally:
            http.close()

    return handle


ROUTES: dict[str, Handler] = {path: door_route(path) for path in DOOR_PATHS}
