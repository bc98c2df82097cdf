"""The hot path in plain ASGI: doors and the count route before FastAPI, the rest after the edge.

    app = RouteGate(api, doors.ROUTES)   # path -> handler, e.g. "/v1/chat/completions"
    # POST /v1/chat/completions -> await ROUTES[path](HTTPExchange(...)); the rest -> api
    # anything else -> the edge's checks (gateway/edge.py), then api

``POST /v1/chat/completions`` carries nearly all the traffic. It skips
FastAPI's routing, dependency resolution and exception middleware and
Starlette's ``Request``/``Response`` objects, which cost about as much CPU per
request as routegate's own work (loadtest/README.md). The admin, usage and
meta routes stay ordinary FastAPI routes behind it, each first admitted by
the edge: its key checked and its body bounded before FastAPI reads a byte.
The lifespan goes to FastAPI, so ``app.state.gw`` is shared. One request and
its answer are an ``HTTPExchange`` (``gateway/exchange.py``).
"""

from __future__ import annotations

from typing import Any

from core.errors import GatewayError, MethodNotAllowed
from gateway.edge import admit, bounded_body
from gateway.exchange import Handler, HTTPExchange, Receive, Scope, Send
from gateway.ids import response_request_id
from gateway.pipeline.serve import ClientGone


class RouteGate:
    """The served ASGI app: hot routes in plain ASGI, the rest through the edge to FastAPI."""

    def __init__(self, api: Any, routes: dict[str, Handler]) -> None:
        self.api = api
        self.state = api.state
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            handler = self._routes.get(scope["path"])
            if handler is not None:
                http = HTTPExchange(self, scope, receive, send)
                if scope["method"] == "POST":
                    await handler(http)
                else:
                    error = MethodNotAllowed(f"{scope['path']} accepts POST only.")
                    await http.send_json(error.status_code, error.to_json(), {
                        "allow": "POST",
                        "x-request-id": response_request_id(http.headers.get("x-request-id"))})
                return
            await self._admitted(HTTPExchange(self, scope, receive, send))
            return
        await self.api(scope, receive, send)

    async def _admitted(self, http: HTTPExchange) -> None:
        """FastAPI's routes, once the edge let the request in (``gateway/edge.py``)."""
        edge = self.state.edge
        gate = edge.gates.find(http.scope["method"], http.scope["path"])
        try:
            await admit(gate, self.state.gw, edge, http)
            receive = await bounded_body(gate, http)
        except ClientGone:
            return
        except GatewayError as exc:
            await http.send_json(exc.status_code, exc.to_json(), {
                **exc.headers,
                "x-request-id": response_request_id(http.headers.get("x-request-id"))})
            return
        await self.api(http.scope, receive, http.send)
