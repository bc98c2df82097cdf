"""``backend: anthropic``: a model behind Anthropic's Messages API.

    backend = AnthropicBackend(model_config)       # base_url defaults to Anthropic's
    completion = await backend.complete(call)      # call.payload: an OpenAI chat body
    stream = await backend.stream(call)            # chat chunks, usage chunk, [DONE]

``POST {base_url}/v1/messages`` with ``x-api-key`` (from ``api_key_env``),
``anthropic-version`` (``api_version``, default ``2023-06-01``: the version
after it, ``2026-10-21``, refuses ``temperature`` and ``top_p``, which are
then not sent) and ``content-type``. The chat body is translated
(``to_wire.py``) and the answer translated back (``from_wire.py``,
``events.py``), so the pipeline sees what an OpenAI-compatible upstream
would send; the usage keeps the cache's reads and writes apart.

Same protocol, no translation: a call that carries a Messages body
(``call.native``, from the ``/v1/messages`` door) goes upstream as the client
wrote it but for ``model`` (and its ``anthropic-beta`` header), and its
answer comes back as Anthropic wrote it (``Completion.native``,
``NativeEvent``s), naming the configured model. The chat form rides beside
it for the pipeline's checks.

Transports, timeouts, live stats, the replicas' affinity and the network
failures' conversion are ``openai_compat``'s; Anthropic's statuses are
converted in ``errors.py``.
"""

from __future__ import annotations

import asyncio
import os
import re
import time

import orjson

from backends.anthropic_messages.errors import http_error
from backends.anthropic_messages.events import ChatChunks
from backends.anthropic_messages.from_wire import to_chat_completion, usage_of
from backends.anthropic_messages.stream import MessagesChunkStream
from backends.anthropic_messages.to_wire import to_messages_body
from backends.base import ANTHROPIC_MESSAGES, Completion, NativeRequest, UpstreamCall
from backends.openai_compat import OpenAICompatBackend
from backends.stream import StreamMeter, open_stream
from backends.transport import Response, Transport
from core.config import ModelConfig
from core.errors import GatewayError, UpstreamError, UpstreamRejected
from core.escalation_config import DEFAULT_MAX_REST_S

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_VERSION = "2023-06-01"
NO_SAMPLING_FROM = "2026-10-21"        # this API version refuses temperature and top_p
MESSAGES_PATH = "/v1/messages"
CHAT_ROUTE = "chat/completions"
# A client's anthropic-beta header forwarded on a native call: names, commas, spaces only.
_BETA = re.compile(r"[A-Za-z0-9._, -]{1,512}")


class AnthropicBackend(OpenAICompatBackend):
    native_protocol = ANTHROPIC_MESSAGES

    def __init__(self, model: ModelConfig, transport: Transport | None = None, *,
                 max_rest_s: float = DEFAULT_MAX_REST_S) -> None:
        if not model.base_url:
            model = model.model_copy(update={"base_url": DEFAULT_BASE_URL})
        super().__init__(model, transport, max_rest_s=max_rest_s)
        self.version = model.api_version or DEFAULT_VERSION
        headers = b"content-type: application/json\r\nanthropic-version: %s\r\n" % (
            self.version.encode("ascii"))
        key = os.environ.get(model.api_key_env) if model.api_key_env else None
        if key:
            headers += b"x-api-key: " + key.encode("latin-1") + b"\r\n"
        self._headers = headers
        self._sampling = self.version < NO_SAMPLING_FROM

    def _wire(self, call: UpstreamCall) -> tuple[bytes, NativeRequest | None]:
        """The request body: the client's own Messages body, or the chat body translated."""
        if call.route != CHAT_ROUTE:
            raise UpstreamRejected(f"model {self.name} speaks Anthropic's Messages API, which "
                                   f"has no /v1/{call.route}", status_code=400,
                                   code="upstream_unsupported")
        native = call.native if (call.native is not None
                                 and call.native.protocol == self.native_protocol) else None
        if native is not None:
            return orjson.dumps({**native.body, "model": self.model.wire_model}), native
        body = to_messages_body(call.payload, model=self.model.wire_model,
                                max_output_tokens=self.model.max_output_tokens,
                                sampling=self._sampling)
        return orjson.dumps(body), None

    async def _send_wire(self, call: UpstreamCall, body: bytes,
                         native: NativeRequest | None) -> Response:
        """``call`` sent to a replica as ``body`` (``affinity.send``, as ``_send``)."""
        preferred, call.replica = call.replica, None
        resp, call.replica = await self.affinity.send(
            call.payload.get("messages"), preferred, lambda i: self._post(call, i, body, native))
        return resp

    async def _post(self, call: UpstreamCall, replica: int, body: bytes,
                    native: NativeRequest | None) -> Response:
        origin = self._origins[replica]
        headers = self._headers + (call.headers or b"x-request-id: %s\r\n"
                                   % call.request_id.encode("latin-1", "replace"))
        beta = native.headers.get("anthropic-beta") if native is not None else None
        if beta and _BETA.fullmatch(beta):
            headers += b"anthropic-beta: " + beta.encode("ascii") + b"\r\n"
        return await self._transport.request(origin, b"POST", origin.path + MESSAGES_PATH,
                                             headers, body, self._timeouts)

    def _refused(self, resp: Response, body: bytes) -> GatewayError:
        err = http_error(self.model, resp.status, resp.headers, body, self._known_secrets,
                         self.max_rest_s)
        if not isinstance(err, UpstreamRejected):   # the client's own bad request is no failure
            self.stats.observe_failure()
        return err

    async def complete(self, call: UpstreamCall) -> Completion:
        wire, native = self._wire(call)
        started = time.perf_counter()
        self.stats.in_flight += 1
        resp: Response | None = None
        deadline = asyncio.timeout(call.bound_s(self._total_s))
        try:
            async with deadline:
                resp = await self._send_wire(call, wire, native)
                body = await resp.read()
        except BaseException as exc:
            if resp is not None:
                resp.close()   # unread: drop the connection, which stops the upstream
            err = self.convert(exc, generating=deadline.expired())
            if err is None:
                raise
            raise err from None
        finally:
            self.stats.in_flight -= 1
            self._let_go(call)
        if resp.status >= 400:
            raise self._refused(resp, body)
        return self._answer(body, time.perf_counter() - started, native)

    def _answer(self, body: bytes, elapsed: float, native: NativeRequest | None) -> Completion:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            self.stats.observe_failure()
            raise UpstreamError(f"model {self.name} returned invalid JSON") from None
        if (not isinstance(data, dict) or data.get("type") != "message"
                or not isinstance(data.get("content"), list)):
            self.stats.observe_failure()
            raise UpstreamError(f"model {self.name} returned no message")
        chat = to_chat_completion(data, model=self.name, created=int(time.time()))
        usage = usage_of(data.get("usage"))
        self.stats.requests += 1
        mine = None
        if native is not None:
            data["model"] = self.name          # the configured name, as every door gives it
            mine = orjson.dumps(data)
        return Completion(orjson.dumps(chat), chat, usage, elapsed, native=mine)

    async def stream(self, call: UpstreamCall) -> MessagesChunkStream:
        """The upstream's stream, read up to its first chunk within ``first_byte_s``
        (an ``error`` event before it still lets the gateway fall back)."""
        wire, native = self._wire(call)
        meter = StreamMeter(self.stats)

        def make(resp: Response) -> MessagesChunkStream:
            chunks = ChatChunks(self.name, int(time.time()), self._known_secrets)
            return MessagesChunkStream(self, resp, meter, call.replica or 0, chunks,
                                       native.protocol if native else None)

        stream, resp, body = await open_stream(
            self, lambda: self._send_wire(call, wire, native), make, self._first_byte_s,
            lambda: self._let_go(call))
        if stream is not None:
            return stream
        assert resp is not None
        raise self._refused(resp, body)

    async def ready(self) -> bool:
        """Any replica answers ``GET /v1/models`` (no tokens spent)."""
        for origin in self._origins:
            try:
                async with asyncio.timeout(2):
                    resp = await self._transport.request(
                        origin, b"GET", origin.path + "/v1/models", self._headers, b"",
                        self._timeouts)
                    await resp.read()
                    if resp.status < 500:
                        return True
            except (TimeoutError, OSError):
                continue
        return False
