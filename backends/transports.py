"""Which transport a model's upstream gets (``transport.kind``; the interface: ``transport.py``).

    transport = make_transport(model_config)

``kind: auto`` picks the lean client (``backends/http1.py``) for plain
``http://`` upstreams that no ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY``
applies to (``NO_PROXY`` is respected), else aiohttp
(``backends/aiohttp_transport.py``), which is only imported when a model
needs it.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from urllib.parse import urlsplit

from backends.http1 import ConnectionPool
from backends.transport import Transport
from core.config import ModelConfig, TransportConfig


def proxied(url: str) -> bool:
    """Whether an ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` from the
    environment applies to ``url`` (not excluded by ``NO_PROXY``)."""
    proxies = urllib.request.getproxies_environment()
    if not any(proxies.get(k) for k in ("http", "https", "all")):
        return False
    host = urlsplit(url).hostname or ""
    # The environment-only check (typeshed omits it): the same NO_PROXY rules aiohttp follows.
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return not bypass(host, proxies)


def lean_suits(urls: Sequence[str]) -> bool:
    """The lean client serves these upstreams as well as aiohttp would."""
    return all(urlsplit(u).scheme == "http" and not proxied(u) for u in urls)


def make_transport(model: ModelConfig) -> Transport:
    """The transport ``model.transport.kind`` names; ``auto`` decides from the URLs."""
    config: TransportConfig = model.transport
    kind = config.kind
    if kind == "auto":
        kind = "lean" if lean_suits(model.base_urls) else "aiohttp"
    if kind == "lean":
        return ConnectionPool(config)
    from backends.aiohttp_transport import AiohttpTransport  # loaded only when a model needs it

    return AiohttpTransport(config)
