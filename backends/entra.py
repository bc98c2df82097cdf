"""A Microsoft Entra access token for Azure OpenAI, fetched off the event loop and
refreshed before it expires.

    token = EntraToken("gpt-4o")                 # DefaultAzureCredential (the `azure` extra)
    token = EntraToken("gpt-4o", credential)     # or any azure-identity credential
    header_value = await token.token()           # b"eyJ0..." for "authorization: Bearer ..."
    await token.aclose()

The credential is azure-identity's: an async one (``azure.identity.aio``) is
awaited, a sync one runs in a worker thread, so a token fetch (a network round
trip to Entra, or a subprocess for the Azure CLI) never blocks the event loop.
A token is reused until ``REFRESH_BEFORE_S`` before it expires; from then on
the first request starts one refresh in the background and keeps using the
current token, and only an expired (or never fetched) token is waited for.
One fetch runs at a time, whatever the number of requests waiting.

A failed fetch is ``UpstreamAuth`` (502 ``upstream_auth``): the operator's
credential, never the client's. Its message names the model, not the reason,
which is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from core.errors import UpstreamAuth

logger = logging.getLogger("routegate.backends")

SCOPE = "https://cognitiveservices.azure.com/.default"
REFRESH_BEFORE_S = 300.0     # Entra's tokens live about an hour; azure-identity refreshes at 5 min
FETCH_TIMEOUT_S = 30.0
RETRY_AFTER_FAILURE_S = 10.0  # a background refresh that failed is tried again after this
MAX_TOKEN_BYTES = 16384      # a header's worth; a credential's answer is bounded like any other


def default_credential() -> Any:
    """azure-identity's ``DefaultAzureCredential`` (async), or a clear error without it."""
    try:
        from azure.identity.aio import DefaultAzureCredential
    except ImportError:
        raise RuntimeError(
            "backend: azure_openai without api_key_env authenticates with Microsoft Entra "
            "ID, which needs azure-identity: pip install 'routegate[azure]' (or set "
            "api_key_env to the variable holding the resource's key)") from None
    return DefaultAzureCredential()


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a background refresh's failure as seen: it was logged, and the requests
    that waited for it raised it."""
    if not task.cancelled():
        task.exception()


class EntraToken:
    def __init__(self, model: str, credential: Any = None, *, scope: str = SCOPE,
                 clock: Callable[[], float] = time.time) -> None:
        self._model = model
        self._owned = credential is None
        self._credential = credential if credential is not None else default_credential()
        self._scope = scope
        self._clock = clock
        self._value = b""
        self._expires_on = 0.0
        self._refresh: asyncio.Task[None] | None = None
        self._failed_at = float("-inf")

    async def token(self) -> bytes:
        left = self._expires_on - self._clock()
        if self._value and left > REFRESH_BEFORE_S:
            return self._value
        valid = bool(self._value) and left > 0
        refresh = self._refresh
        if refresh is None or refresh.done():
            if valid and self._clock() - self._failed_at < RETRY_AFTER_FAILURE_S:
                return self._value   # a refresh just failed: not one per request meanwhile
            refresh = self._refresh = asyncio.ensure_future(self._fetch())
            refresh.add_done_callback(_retrieve)
        if valid:
            return self._value       # the refresh runs behind this request
        # Shielded: one request going away must not cancel the fetch the others wait for.
        await asyncio.shield(refresh)
        return self._value

    async def _fetch(self) -> None:
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                get = self._credential.get_token
                if inspect.iscoroutinefunction(get):
                    access = await get(self._scope)
                else:
                    access = await asyncio.to_thread(get, self._scope)
            value = str(access.token).encode("latin-1")
            expires_on = float(access.expires_on)
        except Exception as exc:   # azure-identity's errors, a timeout, a malformed answer
            self._failed_at = self._clock()
            logger.error("model %s: no Microsoft Entra token (%s: %s)", self._model,
                         type(exc).__name__, str(exc)[:300])
            raise UpstreamAuth(f"model {self._model} could not get its Microsoft Entra "
                               "token") from None
        if not value or len(value) > MAX_TOKEN_BYTES or b"\r" in value or b"\n" in value:
            raise UpstreamAuth(f"model {self._model} got an unusable Microsoft Entra token")
        self._value, self._expires_on = value, expires_on

    async def aclose(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            self._refresh.cancel()
            with contextlib.suppress(BaseException):
                await self._refresh
        close = getattr(self._credential, "close", None)
        if self._owned and close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result
