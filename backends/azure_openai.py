"""``backend: azure_openai``: an Azure OpenAI deployment, OpenAI's protocol at Azure's URLs.

    backend = AzureOpenAIBackend(model_config)       # base_url: https://RESOURCE.openai.azure.com
    completion = await backend.complete(UpstreamCall("req-1", payload, prompt_tokens=12))

Everything but the address and the credential is ``OpenAICompatBackend``'s:
transports, timeouts, streams, live stats and the error mapping. What differs:

- the path: ``{base_url}/openai/deployments/{upstream_model}/{route}?api-version=V``
  (chat/completions, completions and embeddings alike); Azure picks the model
  by the deployment in the path and ignores the body's ``model``;
- the credential: ``api-key: <key>`` from ``api_key_env``; without ``api_key_env``,
  a Microsoft Entra token (``backends/entra.py``, the ``azure`` extra);
- ``api_version`` defaults to ``2024-10-21``, the latest GA dated version
  (``/work/notes/providers.md`` 2.1). ``stream_options`` (the usage chunk every
  stream is billed from) is sent only to versions from ``2024-09-01-preview`` on:
  older ones refuse it, and their streams are billed from the gateway's own count;
- a 400 whose code is ``content_filter`` (Azure's content management policy
  refused the prompt) reaches the client as a 400 ``content_filter`` naming the
  categories: the client's prompt, not the model's health;
- a 429's wait is read from ``retry-after-ms`` / ``x-ms-retry-after-ms`` before
  ``retry-after``, as Azure's own SDKs do.

``prompt_filter_results`` and ``content_filter_results`` pass through untouched:
the answer's bytes go to the client as they came, and a stream's first chunk
(empty ``choices``, only the prompt's filter results) is relayed like any other.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any
from urllib.parse import quote

import orjson

from backends.base import UpstreamCall
from backends.entra import EntraToken
from backends.openai_compat import MAX_MESSAGE, OpenAICompatBackend, retry_after_s, scrub_secrets
from backends.transport import Response, Transport
from core.config import ModelConfig
from core.errors import GatewayError, UpstreamRateLimited, UpstreamRejected
from core.escalation_config import DEFAULT_MAX_REST_S

DEFAULT_API_VERSION = "2024-10-21"
FIRST_STREAM_USAGE = "2024-09-01"     # the first api-version with stream_options.include_usage
_DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})(-preview)?$")


def streams_usage(api_version: str) -> bool:
    """Whether this api-version takes ``stream_options`` (dated versions from
    2024-09-01-preview on; ``v1``, ``latest`` and ``preview`` are current)."""
    dated = _DATED.match(api_version)
    return dated is None or dated.group(1) >= FIRST_STREAM_USAGE


def azure_retry_after_s(headers: dict[str, str], cap: float = DEFAULT_MAX_REST_S) -> float | None:
    """A 429's wait: ``retry-after-ms`` or ``x-ms-retry-after-ms`` (milliseconds)
    first, then ``retry-after`` (seconds or an HTTP date); at most ``cap``."""
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        ms = retry_after_s(headers.get(name), cap * 1000)
        if ms is not None:
            return ms / 1000
    return retry_after_s(headers.get("retry-after"), cap)


def content_filter(body: bytes) -> list[str] | None:
    """The filtered categories of Azure's content-filter 400 (``code: content_filter``),
    e.g. ``["hate (medium)"]``; None when the body is another error.

    The result sits under ``innererror`` (or ``inner_error``, on newer endpoints),
    as ``content_filter_result`` in observed answers and ``content_filter_results``
    in the docs' example: every spelling is read."""
    try:
        data = orjson.loads(body[:65536])
    except orjson.JSONDecodeError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or error.get("code") != "content_filter":
        return None
    inner = error.get("innererror") or error.get("inner_error") or data.get("innererror") or {}
    results: Any = {}
    if isinstance(inner, dict):
        results = inner.get("content_filter_result") or inner.get("content_filter_results") or {}
    categories = []
    for name, verdict in (results.items() if isinstance(results, dict) else ()):
        if isinstance(verdict, dict) and verdict.get("filtered") is True:
            severity = verdict.get("severity")
            categories.append(f"{name} ({severity})" if isinstance(severity, str) else str(name))
    return categories[:16]


class AzureOpenAIBackend(OpenAICompatBackend):
    def __init__(self, model: ModelConfig, transport: Transport | None = None, *,
                 max_rest_s: float = DEFAULT_MAX_REST_S, credential: Any = None) -> None:
        super().__init__(model, transport, max_rest_s=max_rest_s)
        self.api_version = model.api_version or DEFAULT_API_VERSION
        self._stream_usage = streams_usage(self.api_version)
        deployment = quote(model.wire_model, safe="")
        self._prefix = f"/openai/deployments/{deployment}/"
        self._query = "?api-version=" + quote(self.api_version, safe="")
        headers = b"content-type: application/json\r\n"
        key = os.environ.get(model.api_key_env) if model.api_key_env else None
        if key:
            headers += b"api-key: " + key.strip().encode("latin-1") + b"\r\n"
        self._headers = headers
        self._known_secrets = (key,) if key else ()
        # No key configured: a Microsoft Entra token (DefaultAzureCredential unless given).
        self._entra = None if model.api_key_env else EntraToken(model.name, credential)

    async def _request(self, call: UpstreamCall, replica: int) -> Response:
        origin = self._origins[replica]
        headers = self._headers
        if self._entra is not None:
            headers += b"authorization: Bearer " + (await self._entra.token()) + b"\r\n"
        headers += call.headers or b"x-request-id: %s\r\n" % call.request_id.encode("latin-1",
                                                                                   "replace")
        payload = call.payload
        if not self._stream_usage and "stream_options" in payload:
            payload = {k: v for k, v in payload.items() if k != "stream_options"}
        path = origin.path + self._prefix + call.route + self._query
        return await self._transport.request(origin, b"POST", path, headers,
                                             orjson.dumps(payload), self._timeouts)

    def rejected(self, resp: Response, body: bytes, route: str = "chat/completions"
                 ) -> GatewayError:
        if resp.status == 400:
            categories = content_filter(body)
            if categories is not None:
                named = f": {', '.join(categories)}" if categories else ""
                return UpstreamRejected(
                    f"model {self.name}: Azure's content filter refused the prompt{named}",
                    status_code=400, code="content_filter", param="prompt")
        if resp.status == 429:
            self.stats.observe_failure()
            return UpstreamRateLimited(f"model {self.name} is rate limited upstream",
                                       retry_after_s=azure_retry_after_s(resp.headers,
                                                                         self.max_rest_s))
        if resp.status == 404 and b"DeploymentNotFound" in body[:4096]:
            message = scrub_secrets(body[:4096].decode("utf-8", "replace"))[:MAX_MESSAGE]
            return UpstreamRejected(
                f"model {self.name}: Azure has no deployment {self.model.wire_model!r} at this "
                f"endpoint ({message})", status_code=400, code="upstream_unsupported")
        return super().rejected(resp, body, route)

    async def ready(self) -> bool:
        """Any endpoint answers (below 500) Azure's list of models: no tokens spent, and
        no Entra token fetched for a probe."""
        for origin in self._origins:
            try:
                async with asyncio.timeout(2):
                    resp = await self._transport.request(
                        origin, b"GET", origin.path + "/openai/models" + self._query,
                        self._headers, b"", self._timeouts)
                    await resp.read()
                    if resp.status < 500:
                        return True
            except (TimeoutError, OSError):
                continue
        return False

    async def aclose(self) -> None:
        if self._entra is not None:
            await self._entra.aclose()
        await super().aclose()
