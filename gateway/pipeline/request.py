"""The pipeline's own request: what every protocol adapter parses into.

    req = ModelRequest(body=..., model="auto", messages=[...], operation=CHAT, ...)

Every door (``gateway/protocols/``) turns its wire request into one of these:
``body`` is the OpenAI-compatible body sent upstream to ``operation``'s route
(every upstream speaks OpenAI's protocol), ``messages`` is what is counted
and classified. The pipeline never asks which door a request came through;
``wire`` is the door's own state, handed back to it when the answer is
rendered. The helpers below are the checks the OpenAI-shaped doors share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from backends.base import NativeRequest
from core.errors import InvalidRequest, MalformedJSON
from gateway.observe.tracing import TraceContext

T = TypeVar("T")
AUTO = "auto"
QUALITY_HEADER = "x-routegate-quality"
MAX_CHOICES = 128          # OpenAI's own bound on ``n``

# What the upstream is asked to do: its OpenAI-compatible route.
CHAT, COMPLETION, EMBEDDING = "chat/completions", "completions", "embeddings"


@dataclass(slots=True)
class ModelRequest:
    body: dict[str, Any]          # the upstream body (model id rewritten per attempt)
    model: str                    # as the client named it ("auto" for routed requests)
    messages: list[dict[str, Any]]   # what is counted and classified
    stream: bool
    include_usage: bool           # the client asked for the usage chunk
    max_tokens: int | None
    choices: int                  # answers asked for (``n``), each up to max_tokens
    quality: float | None         # per-request quality target override
    has_tools: bool
    has_response_format: bool
    operation: str = CHAT         # the upstream route: CHAT, COMPLETION or EMBEDDING
    templated: bool = True        # messages go through a chat template (embeddings: raw texts)
    extra_prompt_tokens: int = 0  # prompt tokens given as token ids (counted as they are)
    wire: Any = None              # the door's own state, for rendering its answer
    # The door's own body, for an upstream that speaks the door's protocol (which then
    # gets it as the client wrote it: backends/base.py); every other one gets ``body``.
    native: NativeRequest | None = None
    size: int = 0                 # the body's bytes, as the client sent it
    # ids sent upstream and logged (x-request-id, traceparent)
    trace: TraceContext = field(default_factory=lambda: TraceContext.from_headers({}))

    @property
    def routed(self) -> bool:
        return self.model == AUTO


# A body larger than this is checked, parsed and counted in a worker thread: pure-Python
# validation switches the GIL every few ms there, so the event loop keeps serving others.
OFFLOAD_BYTES = 64 * 1024
PARSE_DEADLINE_S = 5.0


async def off_loop(raw: bytes, parse: Callable[..., T], *args: Any) -> T:
    """``parse(*args)``, on the loop for a small body (the usual, at once), else in a
    worker thread within ``PARSE_DEADLINE_S``."""
    if len(raw) <= OFFLOAD_BYTES:
        return parse(*args)
    try:
        async with asyncio.timeout(PARSE_DEADLINE_S):
            return await asyncio.to_thread(parse, *args)
    except TimeoutError:
        raise InvalidRequest(f"The request took over {PARSE_DEADLINE_S:g} s to check; send "
                             "fewer content parts.", code="request_too_complex") from None


def structural_objects(raw: bytes) -> int:
    """JSON objects in ``raw``, counted without parsing it: an object opens with ``{``
    then a key's quote or whitespace, which cannot occur inside a JSON string (there a
    quote is escaped and a newline or tab is written as an escape). An upper bound on
    the parts, blocks, tools and messages a body carries, for a few ms on 10 MiB."""
    return (raw.count(b'{"') + raw.count(b'{ "') + raw.count(b"{\n") + raw.count(b"{\r")
            + raw.count(b"{\t"))


def check_shape(raw: bytes, max_objects: int) -> None:
    """Refuse a body of more JSON objects than ``max_objects`` before it is parsed
    (400 ``too_many_parts``); a small body cannot hold that many and is not scanned."""
    if len(raw) <= 4 * max_objects:
        return
    objects = raw.count(b'{"')           # most bodies: compact JSON, one pass is enough
    if objects <= max_objects:
        objects = structural_objects(raw)
    if objects > max_objects:
        raise InvalidRequest(f"The request holds {objects} JSON objects (messages, content "
                             f"parts, tools), over this gateway's limit of {max_objects} "
                             "(max_body_objects).", code="too_many_parts")


def load_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or OpenAI's 400 ``malformed_json``."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MalformedJSON("We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict):
        raise MalformedJSON("The request body must be a JSON object.")
    return body


def quality_of(value: Any, param: str) -> float:
    try:
        q = float(value)
    except (TypeError, ValueError):
        q = -1.0
    if not 0 < q < 1:
        raise InvalidRequest(f"quality target must be a number between 0 and 1, got {value!r}",
                             param=param)
    return q


def model_and_quality(body: Mapping[str, Any], headers: Mapping[str, str]
                      ) -> tuple[str, float | None]:
    """The model named (``auto:0.9`` is ``auto`` with target 0.9) and the quality target."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is a required string", param="model",
                             code="missing_required_parameter")
    if model.startswith(AUTO + ":"):
        return AUTO, quality_of(model[len(AUTO) + 1 :], "model")
    if headers.get(QUALITY_HEADER) is not None:
        return model, quality_of(headers[QUALITY_HEADER], QUALITY_HEADER)
    return model, None


def positive_int(body: Mapping[str, Any], name: str, most: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequest(f"'{name}' must be a positive integer, got {value!r}", param=name)
    if most is not None and value > most:
        raise InvalidRequest(f"'{name}' must be at most {most}, got {value}", param=name)
    return value


def typed(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise InvalidRequest(f"'{name}' must be {what}", param=name)
    return value
