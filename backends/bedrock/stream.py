"""A ConverseStream answer as the gateway's ``ChunkStream`` of OpenAI chunks.

    stream = BedrockStream(backend, resp, meter, ChunkTranslator(...))
    await stream.prime()                  # the first chunk is in (or the upstream failed)
    async for event in stream: ...        # SSEEvent: chat.completion.chunk, usage, [DONE]

The body is AWS's event stream (``application/vnd.amazon.eventstream``): binary
frames, each with a prelude, headers and a CRC32, decoded by botocore's own
``EventStreamBuffer`` (which checks both CRCs and caps headers at 128 KiB and a
payload at 24 MiB). An ``event`` frame goes through ``ChunkTranslator``
(``reply.py``); an ``exception`` frame (``throttlingException``,
``modelStreamErrorException``, ...) is the gateway's error for it
(``errors.py``): before the first chunk the ladder falls back, after it the
relay ends the client's stream with an error event. After ``metadata`` (the
usage, which follows ``messageStop``) the stream ends with ``[DONE]``; a body that
ends before ``messageStop`` is truncated.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from botocore.eventstream import EventStreamBuffer, EventStreamMessage, ParserError

from backends.bedrock.errors import bedrock_error
from backends.bedrock.reply import ChunkTranslator
from backends.sse import DONE, SSEEvent
from backends.stream import MeteredStream, StreamMeter
from backends.transport import Response
from core.errors import GatewayError, UpstreamError


def _json(payload: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise UpstreamError("an event's payload is not JSON") from None
    return data if isinstance(data, dict) else {}


class BedrockStream(MeteredStream):
    def __init__(self, backend: Any, resp: Response, meter: StreamMeter,
                 translator: ChunkTranslator) -> None:
        self._backend = backend        # name, stats, between_s, convert, known secrets
        self._resp = resp
        self._meter = meter
        self._stats = backend.stats
        self._frames = EventStreamBuffer()
        self._translator = translator
        self._pending: list[SSEEvent] = []
        self._ended = False            # [DONE] is pending or sent

    @property
    def buffered(self) -> bool:
        return bool(self._pending)

    def _events_of(self, message: EventStreamMessage) -> list[SSEEvent]:
        headers = message.headers
        kind = headers.get(":message-type")
        name = self._backend.name
        if kind == "event":
            chunks = self._translator.feed(str(headers.get(":event-type")),
                                           _json(message.payload))
            return [SSEEvent.from_data(chunk) for chunk in chunks]
        if kind == "exception":
            code = str(headers.get(":exception-type") or "")
            text = _json(message.payload).get("message")
            raise bedrock_error(name, code, 0, text if isinstance(text, str) else "",
                                known=self._backend.known_secrets)
        raise bedrock_error(name, str(headers.get(":error-code") or ""), 0,
                            str(headers.get(":error-message") or ""))

    async def _read_events(self) -> bool:
        """Read until at least one event is pending; False at the end of the stream."""
        while not self._pending:
            if self._translator.finished or self._ended:
                if self._ended:
                    return False
                self._ended = True
                self._pending.append(SSEEvent(DONE, None, done=True))
                return True
            chunk = await self._resp.readany()
            if not chunk:
                if not self._translator.stopped:
                    return False
                self._translator.finished = True      # metadata never came: no usage
                continue
            self._frames.add_data(chunk)
            try:
                for message in self._frames:
                    self._pending.extend(self._events_of(message))
            except ParserError as exc:
                raise UpstreamError(f"model {self._backend.name} sent a broken event stream "
                                    f"({type(exc).__name__})") from None
        return True

    async def prime(self) -> None:
        if not await self._read_events():
            raise UpstreamError(f"model {self._backend.name} closed the stream without data")

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        try:
            while True:
                if not self._pending:
                    async with asyncio.timeout(self._backend.between_s):
                        if not await self._read_events():
                            raise UpstreamError(
                                f"model {self._backend.name} ended the stream before its end",
                                code="upstream_stream_truncated")
                event = self._pending.pop(0)
                self._meter.observe(event)
                if event.is_usage_only:
                    self._meter.usage = self._translator.usage   # cache writes included
                yield event
                if event.done:
                    return
        except (TimeoutError, OSError) as exc:   # only network failures; a bug propagates
            err = self._backend.convert(exc, mid_stream=True)
            assert err is not None
            raise err from None
        except GatewayError:
            self._stats.observe_failure()
            raise

    async def aclose(self) -> None:
        if not self._close_once():
            return
        # Closing mid-stream drops the connection, which stops the generation upstream.
        try:
            if self._meter.done and not self._resp.done:
                with contextlib.suppress(TimeoutError, OSError):
                    async with asyncio.timeout(1.0):
                        while await self._resp.readany():
                            pass
        finally:
            self._resp.release()
