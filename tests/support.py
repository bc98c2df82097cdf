"""Real servers for tests: the simulator and the gateway, as subprocesses on loopback.

    with run_simulator() as sim_url, run_gateway(config_dict) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-test")

They live in ``loadtest/servers.py``, since the shipped benchmarks start the
same servers and ``tests`` is not installed with the package; this module
keeps the tests' import path.
"""

from __future__ import annotations

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
           "free_port", "hashed", "run_gateway", "run_simulator", "sim_model", "stop",
           "wait_http"]
