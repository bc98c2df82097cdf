"""Request ids: the gateway's own, and the client's (echoed and logged only).

    rid = new_request_id()                       # "req_3f9a...", 96 random bits
    echo = client_request_id(headers.get("x-request-id"))   # or None

Budget idempotency keys on the gateway's id. A client-chosen id is never
trusted for money: reusing one trace id across calls (as many SDKs and
proxies do) must bill, limit and rate-count every call like any other.
"""

from __future__ import annotations

from random import getrandbits

MAX_CLIENT_ID_CHARS = 128


def new_request_id() -> str:
    # Unique, not secret (nothing is authorised by it): no syscall per request.
    return f"req_{getrandbits(96):024x}"


def client_request_id(incoming: str | None) -> str | None:
    """The client's ``x-request-id`` when it is safe to echo in a header and a log."""
    if incoming and len(incoming) <= MAX_CLIENT_ID_CHARS and incoming.isprintable():
        return incoming
    return None


def response_request_id(incoming: str | None) -> str:
    """The id a non-chat route answers with: the client's, else a fresh one."""
    return client_request_id(incoming) or new_request_id()
