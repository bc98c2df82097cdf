"""An upstream stream of chat chunks → the Responses API's stream events.

    stream = ResponsesStream(wire, model="small", save=None)
    stream.feed(chunk)            # [b"event: response.created\\ndata: {...}\\n\\n", ...]
    await stream.finish(usage)    # the closing events, ending in response.completed
    stream.fail(exc)              # response.failed, then an error event the SDK raises

The events are OpenAI's (``openai.types.responses``), in its order, each with
its ``type`` and a ``sequence_number`` from 0:

    response.created, response.in_progress
    response.output_item.added (message), response.content_part.added,
        response.output_text.delta ..., response.output_text.done,
        response.content_part.done, response.output_item.done
    response.output_item.added (function_call), response.function_call_arguments.delta ...,
        response.function_call_arguments.done, response.output_item.done
    response.completed (or response.incomplete), with the whole response and the billed usage

An item is closed when the next one opens or the stream ends. The
``error`` event carries OpenAI's documented flat fields and, as OpenAI's own
servers send it, the ``error`` object too: that is what makes the official
SDKs raise instead of passing it on as one more event.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from backends.sse import SSEEvent
from core.errors import GatewayError, RateLimited
from core.usage import Usage
from gateway.pipeline.tool_calls import Piece, ToolCalls
from gateway.protocols.openai_responses.parse import ResponsesWire
from gateway.protocols.openai_responses.render import (
    as_object,
    call_item,
    item_id,
    message_item,
    response_object,
    status_of,
    text_part,
)

Save = Callable[[dict[str, Any]], Awaitable[None]]


def sse(data: dict[str, Any]) -> bytes:
    return b"event: " + data["type"].encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def failure(exc: GatewayError) -> dict[str, Any]:
    """A failed response's ``error`` (its ``code`` is one of OpenAI's ResponseError codes)."""
    code = "rate_limit_exceeded" if isinstance(exc, RateLimited) else "server_error"
    return {"code": code, "message": exc.message, "param": exc.param, "type": exc.error_type}


class ResponsesStream:
    """One stream's translator (``gateway.protocols.base.StreamTranslator``)."""

    def __init__(self, wire: ResponsesWire, model: str, save: Save | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.wire, self.model, self.save, self.clock = wire, model, save, clock
        self.sequence = 0
        self.started = False
        self.output: list[dict[str, Any]] = []
        self.open: int | None = None          # the output index of the item still open
        self.text: list[str] = []             # the open message's text so far
        self.calls: dict[int, int] = {}       # chat tool_call index -> output index
        self.tool_calls = ToolCalls()         # their fragments, checked (pipeline/tool_calls.py)
        self.finish_reason: str | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        # Serialized at once: the items are dicts that keep changing afterwards.
        event = sse({"type": kind, **fields, "sequence_number": self.sequence})
        self.sequence += 1
        return event

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        response = response_object(self.wire, model=self.model, output=[], status="in_progress")
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def feed(self, event: SSEEvent) -> list[bytes]:
        data = event.data
        if not data:
            return []
        if not self.started and isinstance(data.get("model"), str) and data["model"]:
            self.model = data["model"]
        out = self._start()
        choices = data.get("choices")
        choice = as_object(choices[0] if isinstance(choices, list) and choices else None)
        delta = as_object(choice.get("delta"))
        text = delta.get("content") or delta.get("refusal")
        if isinstance(text, str) and text:
            out += self._text(text)
        for piece in self.tool_calls.feed(delta.get("tool_calls")):
            out += self._call(piece)
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        return out

    def _open_message(self) -> list[bytes]:
        out = self._close()
        index = self.open = len(self.output)
        item = message_item(self.wire, index, None, "in_progress")
        self.output.append(item)
        self.text = []
        return out + [self._event("response.output_item.added", output_index=index, item=item),
                      self._event("response.content_part.added", item_id=item["id"],
                                  output_index=index, content_index=0, part=text_part(""))]

    def _text(self, delta: str) -> list[bytes]:
        opened = self.open is not None and self.output[self.open]["type"] == "message"
        out = [] if opened else self._open_message()
        assert self.open is not None
        self.text.append(delta)
        return out + [self._event("response.output_text.delta", item_id=self.output[self.open]["id"],
                                  output_index=self.open, content_index=0, delta=delta, logprobs=[])]

    def _call(self, piece: Piece) -> list[bytes]:
        out: list[bytes] = []
        if piece.started:
            out = self._close()
            index = self.calls[piece.index] = self.open = len(self.output)
            call_id = piece.id or item_id(self.wire, "call", index)
            self.output.append(call_item(self.wire, index, call_id, piece.name, "",
                                         "in_progress"))
            out.append(self._event("response.output_item.added", output_index=index,
                                   item=self.output[index]))
        index = self.calls[piece.index]
        item = self.output[index]
        if not piece.started and not item["name"] and piece.name:
            item["name"] = piece.name
        if piece.arguments:
            item["arguments"] += piece.arguments
            out.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                   output_index=index, delta=piece.arguments))
        return out

    def _close(self, message_status: str = "completed") -> list[bytes]:
        index, self.open = self.open, None
        if index is None:
            return []
        item = self.output[index]
        done = self._event
        if item["type"] == "function_call":
            item["status"] = "completed"
            return [done("response.function_call_arguments.done", item_id=item["id"],
                         name=item["name"], output_index=index, arguments=item["arguments"]),
                    done("response.output_item.done", output_index=index, item=item)]
        text = "".join(self.text)
        item["content"], item["status"] = [text_part(text)], message_status
        return [done("response.output_text.done", item_id=item["id"], output_index=index,
                     content_index=0, text=text, logprobs=[]),
                done("response.content_part.done", item_id=item["id"], output_index=index,
                     content_index=0, part=text_part(text)),
                done("response.output_item.done", output_index=index, item=item)]

    async def finish(self, usage: Usage) -> list[bytes]:
        out = self._start()
        status, incomplete = status_of(self.finish_reason)
        if not self.output:
            out += self._open_message()      # an empty answer is an empty message, as unstreamed
        out += self._close("incomplete" if status == "incomplete" else "completed")
        response = response_object(self.wire, model=self.model, output=self.output, status=status,
                                   usage=usage, incomplete=incomplete,
                                   completed_at=int(self.clock()))
        if self.save is not None:
            await self.save(response)        # before the last event: a chained call finds it
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + [self._event(kind, response=response)]

    def fail(self, exc: GatewayError) -> list[bytes]:
        out = self._start()
        response = response_object(self.wire, model=self.model, output=self.output, status="failed",
                                   error=failure(exc))
        out.append(self._event("response.failed", response=response))
        out.append(self._event("error", code=exc.code, message=exc.message, param=exc.param,
                               error=exc.to_dict()["error"]))
        return out
