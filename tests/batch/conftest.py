"""Fixtures of the batch package tests: the shared real Redis under a unique prefix."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

SHARED_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix nobody else uses on the shared Redis; its keys are deleted afterwards."""
    name = f"rgbtest-{uuid.uuid4().hex[:12]}"
    yield name
    client = redis.Redis.from_url(SHARED_REDIS)
    try:
        keys = list(client.scan_iter(match=name + ":*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
