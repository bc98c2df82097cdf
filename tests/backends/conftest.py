from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support import SHARED
from tests.upstreams.llamacpp import LlamaCppUnavailable, check_available, run_llamacpp

os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))


@pytest.fixture(scope="session")
def llamacpp_url() -> Iterator[str]:
    """llama.cpp's server with Gemma 3 270M on loopback; its ``/v1`` base URL."""
    try:
        check_available()
    except LlamaCppUnavailable as exc:
        print(f"skipping llama.cpp tests: {exc}")
        pytest.skip(str(exc))
    with run_llamacpp() as url:
        yield url
