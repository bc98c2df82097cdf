"""AWS credentials and SigV4 signatures for Bedrock, by botocore: no crypto of our own.

    signer = Signer("us-east-1")                         # botocore's credential chain
    signer = Signer("us-east-1", Credentials(k, s))      # or given (tests)
    header_lines = await signer.sign(url, body)          # b"x-amz-date: ...\\r\\nauthorization: ..."

Credentials come from botocore's standard chain (environment, shared config and
credentials files, SSO, web identity, container and instance metadata), the
same one boto3 uses. Resolving them may read files or call a metadata
endpoint, and refreshing temporary ones calls STS: both run in a worker
thread, never on the event loop. A frozen snapshot is reused for
``REFREEZE_S``; botocore refreshes temporary credentials 10 to 15 minutes
before they expire, so a snapshot is never older than its validity.

Signing is ``botocore.auth.SigV4Auth`` with the service name ``bedrock`` (the
service model's ``signingName``; its endpoint prefix is ``bedrock-runtime``):
it signs ``content-type``, ``host`` and ``x-amz-date`` (and
``x-amz-security-token`` with temporary credentials) over the exact path sent,
whose percent-encoded model id it encodes once more, as AWS's canonical
request wants (``/work/notes/providers.md`` 3.1). It is a few HMACs: cheap
enough for the loop.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from core.errors import UpstreamAuth

SERVICE = "bedrock"
REFREEZE_S = 60.0
_REGION_HOST = re.compile(r"bedrock-runtime[.-](?:fips\.)?([a-z]{2}(?:-[a-z]+)+-\d)\.")


def region_in(url: str) -> str | None:
    """The AWS region a Bedrock runtime endpoint names, e.g. ``us-east-1`` in
    ``https://bedrock-runtime.us-east-1.amazonaws.com`` or a VPC endpoint's host."""
    found = _REGION_HOST.search(url)
    return found.group(1) if found else None


class Signer:
    def __init__(self, model: str, region: str | None, credentials: Any = None) -> None:
        self._model = model
        self.region = region             # None: the botocore session's, resolved off the loop
        self._provider = credentials     # botocore Credentials; None: the standard chain
        self._frozen: Any = None
        self._frozen_at = float("-inf")
        self._lock = asyncio.Lock()

    def _freeze(self) -> Any:
        """In a worker thread: resolve (once) and snapshot the credentials."""
        if self._provider is None or self.region is None:
            session = botocore.session.Session()
            self.region = self.region or session.get_config_variable("region")
            self._provider = self._provider or session.get_credentials()
        if self._provider is None:
            raise UpstreamAuth(f"model {self._model}: botocore found no AWS credentials")
        if not self.region:
            raise UpstreamAuth(f"model {self._model}: no AWS region to sign for; set region")
        return self._provider.get_frozen_credentials()

    async def credentials(self) -> Any:
        if time.monotonic() - self._frozen_at < REFREEZE_S:
            return self._frozen
        async with self._lock:
            if time.monotonic() - self._frozen_at >= REFREEZE_S:
                try:
                    self._frozen = await asyncio.to_thread(self._freeze)
                except UpstreamAuth:
                    raise
                except Exception as exc:   # botocore's credential errors: the operator's
                    raise UpstreamAuth(f"model {self._model}: AWS credentials failed to "
                                       f"resolve ({type(exc).__name__})") from None
                self._frozen_at = time.monotonic()
        return self._frozen

    async def sign(self, url: str, body: bytes) -> bytes:
        """The header lines of a signed ``POST url`` with this JSON body (host excluded:
        the transport sends it, as the signature assumed)."""
        creds = await self.credentials()
        request = AWSRequest(method="POST", url=url, data=body,
                             headers={"Content-Type": "application/json"})
        SigV4Auth(creds, SERVICE, self.region).add_auth(request)
        return b"".join(f"{name.lower()}: {value}\r\n".encode("latin-1")
                        for name, value in request.headers.items() if name.lower() != "host")
