"""AWS event-stream frames, encoded for the Bedrock test server (botocore only decodes).

    frame = event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}})
    frame = exception("throttlingException", "Too many tokens, please wait.")

A frame: total length and headers length (u32 each, big-endian), the CRC32 of
those 8 bytes, the headers (name length u8, name, type 7 = string, value length
u16, value), the payload, and the CRC32 of everything before it. The research
notes checked this layout byte for byte against a third-party golden frame and
against boto3's parser (``/work/notes/providers_proof/bedrock/``).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

STRING = 7


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + bytes([STRING]) + struct.pack("!H", len(v)) + v


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(_header(k, v) for k, v in headers.items())
    prelude = struct.pack("!II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    prelude += struct.pack("!I", zlib.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + encoded + payload
    return body + struct.pack("!I", zlib.crc32(body) & 0xFFFFFFFF)


def event(kind: str, payload: dict[str, Any]) -> bytes:
    return frame({":event-type": kind, ":content-type": "application/json",
                  ":message-type": "event"}, json.dumps(payload).encode())


def exception(kind: str, message: str) -> bytes:
    return frame({":exception-type": kind, ":content-type": "application/json",
                  ":message-type": "exception"}, json.dumps({"message": message}).encode())
