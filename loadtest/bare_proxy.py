"""A bare pass-through proxy: the baseline routegate is measured against.

    python -m loadtest.bare_proxy --port 9200 --upstream http://127.0.0.1:9100
    python -m loadtest.bare_proxy --port 9201 --upstream http://127.0.0.1:9100 --client httpx

FastAPI on uvicorn (uvloop, httptools, one worker), one shared upstream client,
no auth, no parsing: the request body is forwarded as bytes, and the upstream's
answer comes back as bytes. A ``text/event-stream`` answer is relayed with a
StreamingResponse as the chunks arrive; anything else is read whole. This is the
least any Python proxy on this stack can do per request.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

Forward = Callable[[bytes], Awaitable[Response]]
FORWARDED = {"content-type": "application/json"}


def aiohttp_forwarder(url: str) -> tuple[Forward, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                    timeout=aiohttp.ClientTimeout(total=None))

    async def forward(body: bytes) -> Response:
        resp = await session.post(url, data=body, headers=FORWARDED)
        media_type = resp.headers.get("content-type", "application/json")
        if not media_type.startswith("text/event-stream"):
            async with resp:
                return Response(await resp.read(), status_code=resp.status, media_type=media_type)

        async def relay() -> AsyncIterator[bytes]:
            async with resp:
                async for chunk in resp.content.iter_any():
                    yield chunk

        return StreamingResponse(relay(), status_code=resp.status, media_type=media_type)

    return forward, session.close


def httpx_forwarder(url: str) -> tuple[Forward, Callable[[], Awaitable[None]]]:
    import httpx

    client = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None,
                                                                 max_keepalive_connections=256))

    async def forward(body: bytes) -> Response:
        resp = await client.send(client.build_request("POST", url, content=body,
                                                      headers=FORWARDED), stream=True)
        media_type = resp.headers.get("content-type", "application/json")
        if not media_type.startswith("text/event-stream"):
            try:
                return Response(await resp.aread(), status_code=resp.status_code,
                                media_type=media_type)
            finally:
                await resp.aclose()

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()

        return StreamingResponse(relay(), status_code=resp.status_code, media_type=media_type)

    return forward, client.aclose


CLIENTS = {"aiohttp": aiohttp_forwarder, "httpx": httpx_forwarder}


def create_app(upstream: str, client: str = "aiohttp") -> FastAPI:
    url = upstream.rstrip("/") + "/v1/chat/completions"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.forward, close = CLIENTS[client](url)
        try:
            yield
        finally:
            await close()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await request.app.state.forward(await request.body())

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main(argv: list[str] | None = None) -> None:
    """python -m loadtest.bare_proxy --port 9200 --upstream http://127.0.0.1:9100 [--client httpx]"""
    parser = argparse.ArgumentParser(description="bare FastAPI pass-through proxy")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9200)
    parser.add_argument("--upstream", required=True, help="base URL, without /v1")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="aiohttp")
    args = parser.parse_args(argv)
    uvicorn.run(create_app(args.upstream, args.client), host=args.host, port=args.port,
                loop="uvloop", http="httptools", access_log=False, log_level="warning")


if __name__ == "__main__":
    main()
