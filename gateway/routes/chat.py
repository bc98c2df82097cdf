"""``POST /v1/chat/completions``: HTTP in, HTTP out; the request itself is the pipeline's.

    await chat_completions(http)    # -> serve_chat(gw, http, http.headers, read_body)

Served in plain ASGI (``gateway.asgi``): this route is nearly all the
traffic. ``gateway.pipeline.serve.serve_chat`` does the rest, and settles after
the last byte went out, so the client never waits for it.
"""

from __future__ import annotations

from gateway.asgi import HTTPExchange
from gateway.pipeline.serve import serve_chat
from gateway.state import AppState

PATH = "/v1/chat/completions"


async def chat_completions(http: HTTPExchange) -> None:
    gw: AppState = http.app.state.gw

    async def read_body() -> bytes:
        return await http.read_body(gw.config.max_body_bytes)

    try:
        await serve_chat(gw, http, http.headers, read_body)
    finally:
        http.close()
