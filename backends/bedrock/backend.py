"""``backend: bedrock``: Amazon Bedrock's Converse and ConverseStream, SigV4-signed.

    backend = BedrockBackend(model_config)     # upstream_model: a model id, profile or ARN
    completion = await backend.complete(UpstreamCall("req-1", chat_payload, prompt_tokens=12))
    stream = await backend.stream(call)        # OpenAI chunks, translated from the event stream

``POST {endpoint}/model/{modelId}/converse`` (and ``/converse-stream``): the
endpoint is ``https://bedrock-runtime.{region}.amazonaws.com`` unless
``base_url`` overrides it (a VPC endpoint, a test server); the model id is
percent-encoded whole (``:`` and ``/`` of an ARN included), as boto3 sends it.
The OpenAI chat body is translated (``translate.py``), the answer translated
back (``reply.py``, ``stream.py``), requests signed (``signing.py``) and
errors mapped (``errors.py``). Transports, timeouts, live stats and the
network-failure conversion are ``openai_compat``'s. Only chat is served: a
Bedrock model on another route is a 400 naming it.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any
from urllib.parse import quote

import orjson

from backends.base import Completion, UpstreamCall
from backends.bedrock.errors import bedrock_error, error_code, error_text
from backends.bedrock.reply import ChunkTranslator, from_converse, read_usage
from backends.bedrock.signing import Signer, region_in
from backends.bedrock.stream import BedrockStream
from backends.bedrock.translate import ConverseRequest, to_converse
from backends.openai_compat import transport_failure
from backends.stream import StreamMeter, open_stream
from backends.transport import Origin, Response, Transport
from backends.transports import make_transport
from core.config import ModelConfig
from core.errors import GatewayError, UpstreamError, UpstreamRejected
from core.escalation_config import DEFAULT_MAX_REST_S
from core.types import LiveStats


def endpoint_of(model: ModelConfig) -> str:
    return model.base_urls[0] if model.base_urls else (
        f"https://bedrock-runtime.{model.region}.amazonaws.com")


class BedrockBackend:
    def __init__(self, model: ModelConfig, transport: Transport | None = None, *,
                 max_rest_s: float = DEFAULT_MAX_REST_S, credentials: Any = None) -> None:
        self.name = model.name
        self.model = model
        self.max_rest_s = max_rest_s
        self.stats = LiveStats()
        endpoint = endpoint_of(model)
        self._origin = Origin.parse(endpoint)
        self._owns_transport = transport is None
        # The transport is chosen by the endpoint (https: aiohttp), even a default one.
        self._transport = transport or make_transport(model.model_copy(
            update={"base_url": endpoint}))
        self._signer = Signer(model.name, model.region or region_in(endpoint), credentials)
        self._path = f"{self._origin.path}/model/{quote(model.wire_model, safe='')}/converse"
        self._timeouts = model.timeouts
        self.between_s = model.timeouts.between_chunks_s
        key = os.environ.get("AWS_SECRET_ACCESS_KEY")
        self.known_secrets: tuple[str, ...] = (key,) if key else ()

    def _translate(self, call: UpstreamCall) -> ConverseRequest:
        if call.route != "chat/completions":
            raise UpstreamRejected(f"model {self.name} is an Amazon Bedrock chat model: it does "
                                   f"not serve /v1/{call.route}", status_code=400,
                                   code="upstream_unsupported")
        return to_converse(call.payload, self.model.max_output_tokens)

    async def _send(self, call: UpstreamCall, path: str, body: bytes) -> Response:
        headers = await self._signer.sign(self._origin.url(path), body)
        # Unsigned extras (x-request-id, traceparent) are allowed: only x-amz-* must be signed.
        headers += call.headers or b"x-request-id: %s\r\n" % call.request_id.encode("latin-1",
                                                                                   "replace")
        return await self._transport.request(self._origin, b"POST", path, headers, body,
                                             self._timeouts)

    def convert(self, exc: BaseException, *, generating: bool = False,
                mid_stream: bool = False) -> GatewayError | None:
        err = transport_failure(self.name, exc, generating=generating, mid_stream=mid_stream)
        if err is not None:
            self.stats.observe_failure()
        return err

    def rejected(self, resp: Response, body: bytes) -> GatewayError:
        err = bedrock_error(self.name, error_code(resp.headers, body), resp.status,
                            error_text(body), resp.headers, self.known_secrets, self.max_rest_s)
        if not isinstance(err, UpstreamRejected):   # the client's own bad request is no failure
            self.stats.observe_failure()
        return err

    def _ids(self, call: UpstreamCall) -> tuple[str, int]:
        return f"chatcmpl-{call.request_id}", int(time.time())

    async def complete(self, call: UpstreamCall) -> Completion:
        request = self._translate(call)
        body = orjson.dumps(request.body)
        started = time.perf_counter()
        self.stats.in_flight += 1
        call.replica = 0
        resp: Response | None = None
        deadline = asyncio.timeout(call.bound_s(self._timeouts.total_s))
        try:
            async with deadline:
                resp = await self._send(call, self._path, body)
                data = await resp.read()
        except BaseException as exc:
            if resp is not None:
                resp.close()
            err = self.convert(exc, generating=deadline.expired())
            if err is None:
                raise
            raise err from None
        finally:
            self.stats.in_flight -= 1
        if resp.status >= 400:
            raise self.rejected(resp, data)
        return self._completion(call, request, data, time.perf_counter() - started)

    def _completion(self, call: UpstreamCall, request: ConverseRequest, body: bytes,
                    elapsed: float) -> Completion:
        try:
            data = orjson.loads(body)
            if not isinstance(data, dict):
                raise UpstreamError("the answer is not a JSON object")
            chat_id, created = self._ids(call)
            chat = from_converse(data, chat_id, self.model.name, created,
                                 request.structured)
        except (orjson.JSONDecodeError, UpstreamError) as exc:
            self.stats.observe_failure()
            detail = exc.message if isinstance(exc, UpstreamError) else "invalid JSON"
            raise UpstreamError(f"model {self.name} answered badly: {detail}",
                                code=getattr(exc, "code", None) or "upstream_error") from None
        usage, _ = read_usage(data.get("usage"))
        self.stats.requests += 1
        return Completion(orjson.dumps(chat), chat, usage, elapsed)

    async def stream(self, call: UpstreamCall) -> BedrockStream:
        """The answer's chunks, the first read within ``first_byte_s`` (so the gateway
        can still fall back before it sends the client anything)."""
        request = self._translate(call)
        body = orjson.dumps(request.body)
        chat_id, created = self._ids(call)
        translator = ChunkTranslator(chat_id, self.model.name, created, request.structured)
        meter = StreamMeter(self.stats)
        call.replica = 0
        stream, resp, data = await open_stream(
            self, lambda: self._send(call, self._path + "-stream", body),
            lambda resp: BedrockStream(self, resp, meter, translator),
            self._timeouts.first_byte_s)
        if stream is not None:
            return stream
        assert resp is not None
        raise self.rejected(resp, data)

    async def ready(self) -> bool:
        """The endpoint answers (below 500) an unsigned GET: reachable, no tokens spent."""
        try:
            async with asyncio.timeout(2):
                resp = await self._transport.request(self._origin, b"GET", self._origin.path + "/",
                                                     b"", b"", self._timeouts)
                await resp.read()
                return resp.status < 500
        except (TimeoutError, OSError):
            return False

    async def aclose(self) -> None:
        if self._owns_transport:
            await self._transport.aclose()
