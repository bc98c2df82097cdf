"""Request ids: the gateway's own, and the client's (echoed and logged only).

    rid = new_request_id()                       # "req_" + the time (ms) + 80 random bits
    issued_s(rid)                                # when: POST /v1/feedback's wait asks
    echo = client_request_id(headers.get("x-request-id"))   # or None

Budget idempotency keys on the gateway's id. A client-chosen id is never
trusted for money: reusing one trace id across calls (as many SDKs and
proxies do) must bill, limit and rate-count every call like any other.
"""

from __future__ import annotations

from random import getrandbits
from time import time

MAX_CLIENT_ID_CHARS = 128
_ID_CHARS = 4 + 11 + 20
_HEX = frozenset("0123456789abcdef")


def new_request_id() -> str:
    # Unique, not secret (nothing is authorised by it): the issue time in ms (11 hex
    # digits: until the year 2527), then 80 random bits. No syscall per request.
    return f"req_{int(time() * 1000):011x}{getrandbits(80):020x}"


def issued_s(request_id: str) -> float | None:
    """When ``new_request_id`` made ``request_id`` (epoch seconds); None if it did not."""
    digits = request_id[4:15]
    if (len(request_id) != _ID_CHARS or not request_id.startswith("req_")
            or not all(c in _HEX for c in digits)):   # int() would take "0x", "_", "-"
        return None
    return int(digits, 16) / 1000


def client_request_id(incoming: str | None) -> str | None:
    """The client's ``x-request-id`` when it is safe to echo in a header and a log."""
    if incoming and len(incoming) <= MAX_CLIENT_ID_CHARS and incoming.isprintable():
        return incoming
    return None


def response_request_id(incoming: str | None) -> str:
    """The id a non-chat route answers with: the client's, else a fresh one."""
    return client_request_id(incoming) or new_request_id()
