"""Batch input files: finding their lines and checking them, as pure functions.

    report = check_input(open("requests.jsonl", "rb"), max_lines=50_000,
                         max_line_bytes=10 * 1024 * 1024)
    if report.errors: ...            # ["line 3: custom_id 'a' is used on line 1", ...]
    for line in scan_lines(f): ...   # Line(number=1, offset=0, length=120)

A line is one JSON object per OpenAI's batch input format::

    {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

Blank lines are skipped everywhere (a trailing newline is not a line), so the
offsets found at upload and at batch creation always agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import orjson

CHAT_URL = "/v1/chat/completions"
# What a batch line may ask for, as OpenAI's Batch API allows; one endpoint per file.
BATCH_URLS = (CHAT_URL, "/v1/responses", "/v1/embeddings", "/v1/completions")
MAX_REPORTED_ERRORS = 5
COPY_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # 1-based, counting every physical line
    offset: int
    length: int
    raw: bytes


@dataclass
class InputReport:
    lines: int = 0
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    url: str | None = None        # the one endpoint every line asks for

    def add(self, number: int, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(f"line {number}: {message}")


def scan_lines(f: BinaryIO) -> Iterator[Line]:
    """Every non-blank line of ``f`` with its byte offset and length (newline excluded)."""
    offset = 0
    for number, raw in enumerate(f, start=1):
        stripped = raw.rstrip(b"\r\n")
        if stripped.strip():
            yield Line(number, offset, len(stripped), stripped)
        offset += len(raw)


def parse_request(raw: bytes) -> dict[str, Any]:
    """One line as a request object; raises ValueError saying what is wrong."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise ValueError("custom_id must be a non-empty string")
    if len(custom_id) > 512:
        raise ValueError("custom_id is longer than 512 characters")
    if obj.get("method") != "POST":
        raise ValueError("method must be \"POST\"")
    if obj.get("url") not in BATCH_URLS:
        raise ValueError(f"url must be one of {', '.join(BATCH_URLS)}")
    if not isinstance(obj.get("body"), dict):
        raise ValueError("body must be a JSON object")
    return obj


def bounded_lines(f: BinaryIO, max_length: int) -> Iterator[tuple[int, int, bytes | None]]:
    """(number, length, line) for every non-blank line, newline excluded; the line is
    None when longer than ``max_length``, and such a line is never held in memory whole."""
    number = 0
    # One byte more than a line of max_length plus "\r\n" tells an overlong line.
    while raw := f.readline(max_length + 3):
        number += 1
        total, last = len(raw), raw
        while not last.endswith(b"\n") and len(raw) > max_length + 2:
            last = f.readline(COPY_CHUNK)   # the rest of an overlong line, skipped
            if not last:
                break
            total += len(last)
        length = total - (len(last) - len(last.rstrip(b"\r\n")))
        if length > max_length:
            yield number, length, None
        elif raw.strip():
            yield number, length, raw[:length]


def first_url(f: BinaryIO) -> str | None:
    """The endpoint of a checked file's lines (all lines share it)."""
    line = next(scan_lines(f), None)
    if line is None:
        return None
    url = orjson.loads(line.raw).get("url")
    return url if isinstance(url, str) else None


def check_input(f: BinaryIO, *, max_lines: int, max_line_bytes: int) -> InputReport:
    """Check every line of an upload; stops counting past ``max_lines``.

    A line longer than ``max_line_bytes`` (the gateway's ``max_body_bytes``) is
    refused: the same request sent live would get 413.
    """
    report = InputReport()
    seen: dict[str, int] = {}
    for number, length, raw in bounded_lines(f, max_line_bytes):
        report.lines += 1
        if report.lines > max_lines:
            break
        if raw is None:
            report.add(number, f"{length} bytes, longer than the {max_line_bytes}-byte limit "
                               "on a request (max_body_bytes)")
            continue
        try:
            request = parse_request(raw)
        except ValueError as exc:
            report.add(number, str(exc))
            continue
        report.url = report.url or request["url"]
        if request["url"] != report.url:
            report.add(number, f"url {request['url']!r} differs from the file's {report.url!r}: "
                               "a batch serves one endpoint")
        custom_id = request["custom_id"]
        first = seen.setdefault(custom_id, number)
        if first != number:
            report.add(number, f"custom_id {custom_id!r} is already used on line {first}")
    return report
