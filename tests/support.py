"""Real servers for tests: the simulator and the gateway, as subprocesses on loopback.

    with run_simulator() as sim_url, run_gateway(config_dict) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-test")

They live in ``loadtest/servers.py``, since the shipped benchmarks start the
same servers and ``tests`` is not installed with the package; this module
keeps the tests' import path.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from loadtest.servers import (
    OTHER_KEY,
    REPO,
    SHARED,
    TEST_KEY,
    Gateway,
    base_config,
    child_env,
    free_port,
    hashed,
    run_gateway,
    run_simulator,
    sim_model,
    stop,
    wait_http,
)

__all__ = ["OTHER_KEY", "REPO", "SHARED", "TEST_KEY", "Gateway", "base_config", "child_env",
           "free_port", "hashed", "in_process", "run_gateway", "run_simulator", "sim_model",
           "stop", "wait_http", "clear_of_minute_turn"]


def in_process(data_dir: Path) -> dict:
    """Config keys for a gateway state started in the test's own process
    (``AppState.start``): the shared Redis under fresh key prefixes, no batch
    worker, metrics or request log."""
    return {
        "redis_url": "redis://127.0.0.1:6379/0",
        "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
        "batch": {"worker_in_serve": False, "key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}"},
        "metrics": {"enabled": False},
        "logging": {"requests": False},
        "data_dir": str(data_dir),
    }


def clear_of_minute_turn(seconds: float) -> None:
    """Wait, if need be, until the current UTC minute has ``seconds`` left.

    rpm and tpm are sliding-window counters: the previous minute's count is
    weighed by the share of the last 60 s still inside it, as if its requests
    had been spread evenly. A burst in a minute's last seconds decays faster
    than it really leaves the window, so a test that counts admissions
    exactly against the limit starts where no minute turns under it."""
    left = 60 - time.time() % 60
    if left < seconds:
        time.sleep(left + 0.05)
