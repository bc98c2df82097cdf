"""What the simulator answers when a model's name asks for a script, not a model.

    echo, judge              a whole answer: the prompt back, or a judge's verdict
    status-NNN               that HTTP error (429 with retry-after: 7)
    retry-after-S            a 429 with retry-after: S
    sequence-500.429-TAG     those statuses in turn, then served
    endless                  a stream that never ends

``named_answer`` picks one; ``sim/server.py`` serves every other name.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse


def error_response(status: int, message: str, code: str | None = None) -> Response:
    body = {"error": {"message": message, "type": "server_error" if status >= 500 else
                      "invalid_request_error", "param": None, "code": code}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def echo(payload: dict[str, Any]) -> Response:
    """Return the received body as the answer, so tests can see what went upstream."""
    return text_answer(payload, orjson.dumps(payload).decode())


def judge(payload: dict[str, Any]) -> Response:
    """A judge with a fixed taste, the longer answer, so swapped positions agree."""
    last = payload["messages"][-1]
    text = last.get("content") if isinstance(last, dict) else None
    text = text if isinstance(text, str) else ""
    _, _, rest = text.partition("Answer A:\n")
    first, _, rest = rest.partition("\n\nAnswer B:\n")
    second = rest.rpartition("\n\nWhich")[0]
    return text_answer(payload, "A" if len(first) > len(second) else
                       "B" if len(second) > len(first) else "T")


def text_answer(payload: dict[str, Any], text: str) -> Response:
    """A whole answer of ``text``, streamed in one chunk or not, as the request asked."""
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    base = {"id": "chatcmpl-echo", "created": 0, "model": "echo"}
    if not payload.get("stream"):
        body = {**base, "object": "chat.completion", "usage": usage, "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text},
            "finish_reason": "stop", "logprobs": None}]}
        return Response(orjson.dumps(body), media_type="application/json")
    chunk = {**base, "object": "chat.completion.chunk", "choices": [{
        "index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    events = [chunk]
    if (payload.get("stream_options") or {}).get("include_usage"):
        events.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    stream = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return Response(stream, media_type="text/event-stream")


TEXT_ANSWERS = {"echo": echo, "judge": judge}

FAKE_SECRET = "sk-live-0123456789abcdefABCDEF0123456789"


def status_fault(name: str) -> Response:
    status = int(name.removeprefix("status-"))
    response = error_response(status, f"upstream says no (HTTP {status}); key {FAKE_SECRET} "
                              "was used", "upstream_test")
    if status == 429:
        response.headers["retry-after"] = "7"
    return response


def retry_after_fault(name: str) -> Response:
    response = error_response(429, "upstream says slow down", "rate_limit_exceeded")
    response.headers["retry-after"] = name.removeprefix("retry-after-")
    return response


def sequence_fault(name: str, seen: dict[str, int]) -> Response | None:
    """The next status of ``name``'s script (``sequence-500.429.400-TAG``) as an
    error answer; None once the script is played out (serve normally)."""
    script = [int(s) for s in name.removeprefix("sequence-").partition("-")[0].split(".")
              if s.isdigit()]
    turn = seen[name] = seen.get(name, 0) + 1
    if turn > len(script):
        return None
    status = script[turn - 1]
    response = error_response(status, f"scripted answer {turn} of {len(script)}")
    if status == 429:
        response.headers["retry-after"] = "1"
    return response


def named_answer(name: str, payload: dict[str, Any], sequence_seen: dict[str, int]
                 ) -> Response | None:
    """The scripted answer or fault a model name asks for (``text-*``, ``status-*``,
    ``retry-after-*``, ``sequence-*``, ``endless``), or None for a served model."""
    if (answer := TEXT_ANSWERS.get(name)) is not None:
        return answer(payload)
    if name.startswith("status-"):
        return status_fault(name)
    if name.startswith("retry-after-"):
        return retry_after_fault(name)
    if name.startswith("sequence-") and (scripted := sequence_fault(name, sequence_seen)):
        return scripted
    if name == "endless" and payload.get("stream"):
        return StreamingResponse(endless(), media_type="text/event-stream")
    return None


async def endless() -> Any:
    """A stream that never ends: a token chunk every millisecond until the client leaves."""
    chunk = {"id": "chatcmpl-endless", "object": "chat.completion.chunk", "created": 0,
             "model": "endless", "choices": [{"index": 0, "delta": {"content": "and "},
                                              "finish_reason": None}]}
    raw = b"data: " + orjson.dumps(chunk) + b"\n\n"
    while True:
        yield raw
        await asyncio.sleep(0.001)
