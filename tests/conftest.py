from __future__ import annotations

import os
from collections.abc import Iterator

import openai
import pytest

from tests.support import SHARED, TEST_KEY, Gateway, base_config, run_gateway, run_simulator
from tests.upstreams.llamacpp import LlamaCppUnavailable, check_available, run_llamacpp

os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))


@pytest.fixture(scope="session")
def sim_url() -> Iterator[str]:
    """A standalone simulator: fast serving physics, named fault behaviours."""
    with run_simulator("--tpot-ms", "2", "--prefill", "200000", "--output-mean", "20") as url:
        yield url


@pytest.fixture(scope="session")
def gateway(sim_url: str) -> Iterator[Gateway]:
    with run_gateway(base_config(sim_url)) as gw:
        yield gw


@pytest.fixture
def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)


@pytest.fixture(scope="session")
def llamacpp_url() -> Iterator[str]:
    """llama.cpp's server with Gemma 3 270M on loopback, shared by every test that
    needs a real inference server; its ``/v1`` base URL."""
    try:
        check_available()
    except LlamaCppUnavailable as exc:
        print(f"skipping llama.cpp tests: {exc}")
        pytest.skip(str(exc))
    with run_llamacpp() as url:
        yield url
