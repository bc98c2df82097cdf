"""The request log: one ``request.completed`` event per request, through structlog.

    log = RequestLog.open(config.logging, data_dir)     # None when the log is off
    log.completed(outcome)
    log.close()                                         # writes what is buffered

Each event goes to two places:

- stderr, for any log shipper: coloured console lines on a TTY, JSON lines
  otherwise;
- ``<data_dir>/logs/requests.jsonl`` (``logging.file``), JSON lines that
  ``routegate report`` reads. It is rotated at ``logging.file_max_mb`` into
  ``requests.jsonl.1`` ... ``.N`` (``logging.file_backups``), so it stays bounded.
  Every worker of ``routegate serve --workers N`` appends to the same file: each
  batch is one ``O_APPEND`` write, and rotation happens under a lock file.

Rendering is structlog's; writing is batched: rendered lines are collected and
written every ``FLUSH_AFTER_S`` (or at 256 KiB), one write per sink instead of a
locked, flushed write per request, which cost a fifth of the throughput.

What is logged: the ``Outcome`` fields (ids, team, key *id*, decision, tokens,
cost, timings). API keys never reach an ``Outcome``; the messages do only
with ``logging.prompts: true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import structlog

from core.config import LoggingConfig
from gateway.pipeline.outcome import Outcome

FILE_NAME = "requests.jsonl"
EVENT = "request.completed"
_FIELDS = tuple(name for name in Outcome.__slots__ if name not in ("key", "prompt"))


def _reader(fields: tuple[str, ...]) -> Callable[[Outcome], dict[str, Any]]:
    """``o -> {"field": o.field, ...}``, written out once as ``dataclasses`` writes
    ``__init__``: one dict display, each read specialized (under callgrind 8k fewer
    instructions a request than ``dict.update(zip(fields, attrgetter(*fields)(o)))``)."""
    assert all(name.isidentifier() for name in fields)
    source = "def read(o):\n    return {" + ", ".join(f"{n!r}: o.{n}" for n in fields) + "}\n"
    namespace: dict[str, Any] = {}
    exec(source, namespace)        # the fields are the Outcome's own slot names
    return namespace["read"]  # type: ignore[no-any-return]


_READ_FIELDS = _reader(_FIELDS)


def log_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "logs"


class LogFile:
    """An append-only JSON lines file, rotated by size, shared by processes."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        self._lock = path.with_name(path.name + ".lock")
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def write(self, data: bytes) -> None:
        self._follow_rotation()
        os.write(self._fd, data)
        if os.fstat(self._fd).st_size >= self.max_bytes:
            self._rotate()

    def _follow_rotation(self) -> None:
        """Another process rotated the file away: write to the new one."""
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            current = -1
        if current != os.fstat(self._fd).st_ino:
            os.close(self._fd)
            self._fd = self._open()

    def _rotate(self) -> None:
        with open(self._lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if os.stat(self.path).st_size < self.max_bytes:
                    return   # someone else rotated it meanwhile
            except FileNotFoundError:
                return
            if self.backups == 0:
                os.truncate(self.path, 0)
                return
            for n in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{n}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{n + 1}"))
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        os.close(self._fd)
        self._fd = self._open()

    def close(self) -> None:
        os.close(self._fd)


class BatchedWriter:
    """structlog's output: collects rendered lines and writes them to every sink
    together, a few milliseconds later, off the request's path."""

    FLUSH_AFTER_S = 0.05
    MAX_BUFFER = 256 * 1024

    def __init__(self, sinks: list[Callable[[bytes], None]]) -> None:
        self._sinks = sinks
        self._lines: list[bytes] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None

    def msg(self, line: bytes | str) -> None:
        data = line if isinstance(line, bytes) else line.encode("utf-8", "replace")
        self._lines.append(data if data.endswith(b"\n") else data + b"\n")
        self._size += len(data)
        if self._size >= self.MAX_BUFFER:
            self.flush()
        elif self._timer is None:
            try:
                self._timer = asyncio.get_running_loop().call_later(self.FLUSH_AFTER_S, self.flush)
            except RuntimeError:   # no event loop (a CLI tool): write at once
                self.flush()

    info = msg

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._lines:
            data, self._lines, self._size = b"".join(self._lines), [], 0
            for sink in self._sinks:
                with contextlib.suppress(OSError):   # a full disk must not fail requests
                    sink(data)


def _stream_sink(stream: BinaryIO) -> Callable[[bytes], None]:
    def write(data: bytes) -> None:
        stream.write(data)
        stream.flush()
    return write


def _json(_: Any, __: str, event: dict[str, Any]) -> bytes:
    return orjson.dumps(event, default=str)


class RequestLog:
    def __init__(self, config: LoggingConfig, file: LogFile | None,
                 stderr: BinaryIO | None = None, tty: bool | None = None) -> None:
        self.file = file
        self._file_writer: BatchedWriter | None = None
        self.prompts = config.prompts
        stream = stderr or sys.stderr.buffer
        tty = stream.isatty() if tty is None else tty
        # The Outcome is expanded by the first processor: passing its ~30 fields
        # as keyword arguments through structlog's layers cost 8 us a request.
        # JSON gets epoch seconds (cheaper to make and to compare); people get ISO.
        stamp = structlog.processors.TimeStamper(fmt="iso" if tty else None, utc=True)
        processors: list[Any] = [_expand, stamp]
        if tty:
            # Console lines for people, and still JSON in the file for the report.
            self.writer = BatchedWriter([_stream_sink(stream)])
            if file is not None:
                self._file_writer = BatchedWriter([file.write])
                processors.append(_tee(self._file_writer))
            processors.append(structlog.dev.ConsoleRenderer(colors=True))
        else:
            self.writer = BatchedWriter([_stream_sink(stream)] + ([file.write] if file else []))
            processors.append(_json)
        self._log = structlog.wrap_logger(
            self.writer, processors=processors, cache_logger_on_first_use=True,
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))

    @classmethod
    def open(cls, config: LoggingConfig, data_dir: str | Path) -> RequestLog | None:
        """The log as configured; None when it is off (``logging.requests: false``,
        or the ``routegate.request`` logger below info: ``serve --log-level warning``)."""
        if not config.requests or not logging.getLogger("routegate.request").isEnabledFor(
                logging.INFO):
            return None
        file = None
        if config.file:
            file = LogFile(log_dir(data_dir) / FILE_NAME, int(config.file_max_mb * 2**20),
                           config.file_backups)
        return cls(config, file)

    def completed(self, o: Outcome) -> None:
        self._log.info(EVENT, outcome=o, prompts=self.prompts)

    def close(self) -> None:
        self.writer.flush()
        if self._file_writer is not None:
            self._file_writer.flush()
        if self.file is not None:
            self.file.close()


def _expand(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """The Outcome's fields into the event (``asdict()`` deep-copies: slower)."""
    o: Outcome = event.pop("outcome")
    fields = _READ_FIELDS(o)
    fields["key_id"] = o.key
    if event.pop("prompts") and o.prompt is not None:
        fields["prompt"] = o.prompt
    fields.update(event)                  # structlog's own keys (event, timestamp, level)
    return fields


def _tee(buffered: BatchedWriter) -> Callable[..., dict[str, Any]]:
    """A processor that buffers the JSON line for the file and passes the event on."""
    def tee(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        buffered.msg(orjson.dumps(event, default=str))
        return event
    return tee
