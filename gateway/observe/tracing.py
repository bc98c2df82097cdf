"""Trace context for one request: the ids that go upstream and into the request log.

    trace = TraceContext.from_headers(headers)      # the client's traceparent / x-request-id
    trace.upstream_headers(request_id)              # b"x-request-id: ...\\r\\ntraceparent: ...\\r\\n"

W3C Trace Context (https://www.w3.org/TR/trace-context/): a client's valid
``traceparent`` keeps its trace id, and the gateway's call becomes a new span
in it (a fresh parent id); without one, a new trace starts here. Upstream
``x-request-id`` is the client's own id when it sent a usable one, else the
gateway's, so an upstream's logs can be joined to the client's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from random import getrandbits  # ids need uniqueness, not secrecy: no syscall per request

from gateway.ids import client_request_id

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


@dataclass(frozen=True, slots=True)
class TraceContext:
    trace_id: str                     # 32 hex digits
    span_id: str                      # this request's span in the gateway: 16 hex digits
    flags: str = "01"                 # sampled
    client_request_id: str | None = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> TraceContext:
        rid = client_request_id(headers.get("x-request-id"))
        match = _TRACEPARENT.match((headers.get("traceparent") or "").strip().lower())
        if match and match[1] != _ZERO_TRACE and match[2] != _ZERO_SPAN:
            return cls(match[1], f"{getrandbits(64):016x}", match[3], rid)
        return cls(f"{getrandbits(128):032x}", f"{getrandbits(64):016x}", "01", rid)

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def upstream_headers(self, request_id: str) -> bytes:
        """Header lines for the upstream request: ids only, ASCII by construction
        (``client_request_id`` admits printable text up to 128 characters)."""
        rid = self.client_request_id or request_id
        return (b"x-request-id: " + rid.encode("latin-1", "replace")
                + b"\r\ntraceparent: " + self.traceparent.encode() + b"\r\n")
