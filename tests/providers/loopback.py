"""An ASGI app served on an ephemeral loopback port, in a thread of the test's process.

    with serve(app) as url:          # "http://127.0.0.1:PORT"
        ...                          # the gateway (a subprocess) and the SDKs call url

The provider servers (``azure_server.py``, ``bedrock_server.py``) run this way
so that a test reads their ledger directly while real HTTP reaches them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import uvicorn


@contextlib.contextmanager
def serve(app: Any, timeout_s: float = 10.0) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)
        sock.close()


def in_loop(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test run on a fresh event loop, its fixtures passed as pytest gives them
    (the project uses no async pytest plugin)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))
    return run
