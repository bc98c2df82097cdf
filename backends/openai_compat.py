"""One adapter for every OpenAI-compatible server: vLLM, llama.cpp, Ollama, TGI, OpenAI.

    backend = OpenAICompatBackend(model_config)            # its own transport, from config
    backend = OpenAICompatBackend(model_config, transport)  # or a shared one (caller closes it)
    completion = await backend.complete(UpstreamCall("req-1", payload, prompt_tokens=12))
    await backend.aclose()

HTTP goes through a ``backends.transport.Transport``: the lean httptools
client for plain-HTTP upstreams (a pass-through proxy did about 2,100 req/s
with aiohttp against about 410 with httpx on this 2-core machine, and the
lean client is cheaper still), aiohttp for proxies and the rest.

Timeouts (``core.config.Timeouts``):

- ``connect_s``, ``pool_wait_s``: applied by the transport;
- ``first_byte_s``: a stream's wait for its first event; running out falls back;
- ``between_chunks_s``: a stream's silence between two reads;
- ``total_s``: a whole non-streamed answer. An OpenAI-compatible server sends
  nothing until a non-streamed answer is complete, so its first byte is its
  last: ``first_byte_s`` does not apply. Running out of ``total_s`` means the
  upstream was generating (and will bill for it), so it is never retried.

This module is the backend edge: every failure leaves as a ``core.errors``
exception whose message names the model, never the URL or key. Only network
and protocol failures are converted; anything else is a bug and propagates.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import re
import time
from typing import Any

import orjson

from backends.affinity import PrefixAffinity
from backends.base import Completion, LiveStats, UpstreamCall, Usage
from backends.model_name import BodyModel
from backends.stream import HTTPChunkStream, StreamMeter, open_stream
from backends.transport import (
    ConnectError,
    Origin,
    PoolSaturated,
    Response,
    ResponseTooLarge,
    Transport,
)
from backends.transports import make_transport
from core.config import ModelConfig
from core.errors import (
    GatewayError,
    UpstreamAuth,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamSaturated,
    UpstreamTimeout,
    UpstreamTooLarge,
    UpstreamUnreachable,
)
from core.escalation_config import DEFAULT_MAX_REST_S

logger = logging.getLogger("routegate.backends")

MAX_MESSAGE = 500        # characters of an upstream's error message passed to the client

_SECRETS = [
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 [redacted]"),
    (re.compile(r"(?i)([\w-]*(?:api[_-]?key|token|secret|password|passwd|credential|auth)"
                r"[\w-]*[\"']?\s*[=:]\s*[\"']?)[^\s\"',;&}]+"), r"\1[redacted]"),
    (re.compile(r"://[^/\s:@]+:[^/\s@]+@"), "://[redacted]@"),            # user:pass@host
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"), "[redacted]"),       # OpenAI, Anthropic, ...
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "[redacted]"),          # AWS access keys
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[redacted]"),               # Google API keys
    (re.compile(r"\b(?:gh[pousr]|hf|xox[abprs]|glpat)[_-][A-Za-z0-9_-]{16,}"), "[redacted]"),
    (re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*"), "[redacted]"),      # JWTs
    (re.compile(r"\b[0-9a-fA-F]{32,}\b"), "[redacted]"),                   # long hex
    # Long base64-ish runs with both letters and digits: tokens, not words.
    (re.compile(r"(?<![\w/+-])(?=[\w+/-]*\d)(?=[\w+/-]*[A-Za-z])[\w+/-]{32,}={0,2}"), "[redacted]"),
]


def scrub_secrets(text: str, known: tuple[str, ...] = ()) -> str:
    """``text`` with anything that looks like a credential replaced by
    ``[redacted]``: the ``known`` secrets verbatim, then common key shapes."""
    for secret in known:
        if secret:
            text = text.replace(secret, "[redacted]")
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def retry_after_s(value: str | None, cap: float = DEFAULT_MAX_REST_S) -> float | None:
    """An HTTP ``Retry-After``: delay seconds or an HTTP date, at most ``cap``
    (``breaker.max_rest_s``); None if absent or unreadable.

    >>> retry_after_s("7"), retry_after_s("99999999"), retry_after_s("soon")
    (7.0, 300.0, None)
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds:      # "nan": unreadable
        return None
    # Capped: a huge (or "inf") value once rested a model for years, and the
    # client would have been told to wait as long.
    return min(cap, max(0.0, seconds))


def _seconds(ms: Any, longest_s: float) -> float | None:
    """An upstream-reported duration in ms, as seconds; None unless in [0, longest_s]."""
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        return None
    try:
        seconds = float(ms) / 1000
    except OverflowError:
        return None
    return seconds if 0 <= seconds <= longest_s else None   # NaN compares False


def error_message(body: bytes) -> str:
    """The ``message`` of an OpenAI-style (or TGI/Ollama-style) error body; "" if none."""
    try:
        data = orjson.loads(body[:65536])
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(data, dict):
        return ""
    err = data.get("error", data)
    message = err.get("message", "") if isinstance(err, dict) else err
    return message if isinstance(message, str) else ""


def upstream_error(model: ModelConfig, status: int, headers: dict[str, str], body: bytes,
                   known: tuple[str, ...] = (), max_rest_s: float = DEFAULT_MAX_REST_S
                   ) -> GatewayError:
    """Map an upstream's error status to what the gateway answers (README, "Upstream errors");
    a 429's ``Retry-After`` is capped at ``max_rest_s``."""
    name = model.name
    if status == 429:
        return UpstreamRateLimited(f"model {name} is rate limited upstream",
                                   retry_after_s=retry_after_s(headers.get("retry-after"), max_rest_s))
    if status in (401, 403):
        # routegate's own upstream credential was refused: an operator must act.
        logger.error("model %s: the upstream refused routegate's credential (HTTP %d); check %s",
                     name, status, model.api_key_env or "its api_key_env")
        return UpstreamAuth(f"model {name} refused the gateway's credential")
    if 400 <= status < 500 and status not in (408, 409):
        # The request itself was refused (a context-length error, say). The client sees a
        # 400 whatever the upstream's status, and only its message, scrubbed.
        message = scrub_secrets(error_message(body)[:4096], known)[:MAX_MESSAGE]
        detail = f": {message}" if message else ""
        return UpstreamRejected(f"model {name} rejected the request{detail}", status_code=400)
    return UpstreamError(f"model {name} failed with HTTP {status}", upstream_status=status)


def transport_failure(name: str, exc: BaseException, *, generating: bool = False,
                      mid_stream: bool = False) -> GatewayError | None:
    """A network or protocol failure as a ``core.errors`` exception; None for
    anything else, which is a bug and must propagate as it is."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, PoolSaturated):
        return UpstreamSaturated(f"model {name} has no free upstream connection")
    if isinstance(exc, ResponseTooLarge):
        return UpstreamTooLarge(f"model {name} sent a response over the size limit")
    if isinstance(exc, TimeoutError):
        if mid_stream:
            return UpstreamTimeout(f"model {name} stalled mid-stream", generating=True)
        if generating:
            return UpstreamTimeout(f"model {name} did not finish within total_s", generating=True)
        return UpstreamTimeout(f"model {name} timed out")
    if isinstance(exc, ConnectError):
        return UpstreamUnreachable(f"model {name} is unreachable")
    if isinstance(exc, OSError):
        if mid_stream:
            return UpstreamError(f"model {name} broke off the stream",
                                 code="upstream_stream_truncated")
        return UpstreamError(f"model {name} failed: {type(exc).__name__}")
    return None


class OpenAICompatBackend:
    def __init__(self, model: ModelConfig, transport: Transport | None = None, *,
                 max_rest_s: float = DEFAULT_MAX_REST_S) -> None:
        self.name = model.name
        self.model = model
        self.max_rest_s = max_rest_s        # breaker.max_rest_s: caps an upstream's Retry-After
        self.stats = LiveStats()
        self._owns_transport = transport is None
        self._transport = transport if transport is not None else make_transport(model)
        self._origins = [Origin.parse(u) for u in model.base_urls]
        # Which replica: the one that has this prompt's prefix cached, within a load bound.
        self.affinity = PrefixAffinity(len(self._origins))
        headers = b"content-type: application/json\r\n"
        key = os.environ.get(model.api_key_env) if model.api_key_env else None
        if key:
            headers += f"authorization: Bearer {key}\r\n".encode("latin-1")
        self._headers = headers
        self._known_secrets = (key,) if key else ()
        self._timeouts = model.timeouts
        self._first_byte_s = model.timeouts.first_byte_s
        self._total_s = model.timeouts.total_s
        self.between_s = model.timeouts.between_chunks_s
        self.body_model = BodyModel.of(model)   # the configured name in answers, not the upstream's id

    async def _send(self, call: UpstreamCall) -> Response:
        """``call`` sent to a replica (``affinity.send``): ``call.replica`` says which,
        held until ``_let_go``; None until one took it."""
        preferred, call.replica = call.replica, None
        resp, call.replica = await self.affinity.send(
            call.payload.get("messages") or call.payload.get("prompt"), preferred,
            lambda i: self._request(call, i))
        return resp

    def _let_go(self, call: UpstreamCall) -> None:
        if call.replica is not None:
            self.affinity.release(call.replica)

    async def _request(self, call: UpstreamCall, replica: int) -> Response:
        origin = self._origins[replica]
        # The request id comes from new_request_id: printable, at most 128 characters;
        # the caller's trace headers (gateway/observe/tracing.py) carry their own x-request-id.
        headers = self._headers + (call.headers or b"x-request-id: %s\r\n"
                                   % call.request_id.encode("latin-1", "replace"))
        return await self._transport.request(origin, b"POST", origin.path + "/" + call.route,
                                             headers, orjson.dumps(call.payload), self._timeouts)

    def convert(self, exc: BaseException, *, generating: bool = False,
                mid_stream: bool = False) -> GatewayError | None:
        """``transport_failure``, counted in this backend's stats."""
        err = transport_failure(self.name, exc, generating=generating, mid_stream=mid_stream)
        if err is not None:
            self.stats.observe_failure()
        return err

    def rejected(self, resp: Response, body: bytes, route: str = "chat/completions"
                 ) -> GatewayError:
        if resp.status in (404, 405, 501):
            # Not an answer about the request: this upstream has no such endpoint
            # (a chat server asked for embeddings), or not this upstream model.
            detail = scrub_secrets(error_message(body)[:4096], self._known_secrets)[:MAX_MESSAGE]
            return UpstreamRejected(
                f"model {self.name}'s upstream answered HTTP {resp.status} to /v1/{route}: it "
                f"does not serve this endpoint or model" + (f" ({detail})" if detail else ""),
                status_code=400, code="upstream_unsupported")
        err = upstream_error(self.model, resp.status, resp.headers, body, self._known_secrets,
                             self.max_rest_s)
        if not isinstance(err, UpstreamRejected):   # the client's own bad request is no failure
            self.stats.observe_failure()
        return err

    async def complete(self, call: UpstreamCall) -> Completion:
        started = time.perf_counter()
        self.stats.in_flight += 1
        resp: Response | None = None
        deadline = asyncio.timeout(call.bound_s(self._total_s))
        try:
            async with deadline:
                resp = await self._send(call)
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
            raise self.rejected(resp, body, call.route)
        return self._completion(body, time.perf_counter() - started)

    def _completion(self, body: bytes, elapsed: float) -> Completion:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            self.stats.observe_failure()
            raise UpstreamError(f"model {self.name} returned invalid JSON") from None
        if not isinstance(data, dict) or ("choices" not in data and "data" not in data):
            self.stats.observe_failure()
            raise UpstreamError(f"model {self.name} returned no choices")
        usage = Usage.from_wire(data.get("usage"))
        self.stats.requests += 1
        ttft = self._observe_timings(data.get("timings"))
        body, data = self.body_model.completion(body, data)
        return Completion(body=body, data=data, usage=usage, latency_s=elapsed, ttft_s=ttft)

    def _observe_timings(self, timings: Any) -> float | None:
        """llama.cpp reports prefill and decode times; use them when present.
        Returns the server's prefill time (its TTFT), if it gave one.

        Without them a non-streamed answer says nothing of TPOT: its whole time
        over its tokens holds the upstream's queue and the prefill too (6 tokens in
        0.3 s are not 50 ms a token; docs/pools.md, "Live stats"). The scheduler
        learns its slot time."""
        if isinstance(timings, dict) and "prompt_ms" in timings:
            # The server's own figures feed routing's predictions: a NaN or an
            # absurd value would poison them, so only plausible ones are read.
            ttft = _seconds(timings.get("prompt_ms"), self._total_s)
            if ttft is None:
                return None
            self.stats.observe_ttft(ttft)
            per_token = _seconds(timings.get("predicted_per_token_ms"), self._total_s)
            if per_token:
                self.stats.observe_tpot(per_token)
            return ttft
        return None

    async def stream(self, call: UpstreamCall) -> HTTPChunkStream:
        """The upstream's SSE stream, its first event read within ``first_byte_s``
        (so the gateway can still fall back before it sends the client anything)."""
        meter = StreamMeter(self.stats)
        stream, resp, body = await open_stream(
            self, lambda: self._send(call),
            lambda resp: HTTPChunkStream(self, resp, meter, call.replica or 0),
            self._first_byte_s, lambda: self._let_go(call))
        if stream is not None:
            return stream
        assert resp is not None
        raise self.rejected(resp, body, call.route)

    async def ready(self) -> bool:
        """Any replica answers /models (cheap, no tokens spent)."""
        for origin in self._origins:
            try:
                async with asyncio.timeout(2):
                    resp = await self._transport.request(
                        origin, b"GET", origin.path + "/models", self._headers, b"", self._timeouts)
                    await resp.read()
                    if resp.status < 500:
                        return True
            except (TimeoutError, OSError):
                continue
        return False

    async def aclose(self) -> None:
        if self._owns_transport:
            await self._transport.aclose()
