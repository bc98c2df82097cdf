"""Real servers on loopback: the standalone simulator and a gateway, as subprocesses.

    with run_simulator() as sim_url, run_gateway(base_config(sim_url)) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY)

The benchmarks that need a whole gateway (``bench_batch``, ``bench_escalation``)
and the test suite (``tests/support.py`` re-exports this module) share these,
so this module ships with the package and imports nothing from ``tests``.
The process helpers (``free_port``, ``child_env``, ``wait_http``, ``stop``)
are the ones ``loadtest/targets.py`` starts its servers with.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TEST_KEY = "sk-test-key"
OTHER_KEY = "sk-other-team"


def free_port() -> int:
    """A loopback TCP port free at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child ``python -m`` of this checkout, plus ``extra``."""
    env = dict(os.environ)
    env.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Return once ``url`` answers below 500; raise if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering {url}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer in {timeout}s")


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Send ``sig`` (SIGTERM), then kill what has not exited within ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def run_simulator(*args: str) -> Iterator[str]:
    """The standalone simulator; yields its base URL (ending in /v1)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sim.server", "--port", str(port),
                             *args], env=child_env(), cwd=REPO)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(proc)


@dataclass
class Gateway:
    url: str
    proc: subprocess.Popen[bytes]
    config_path: Path
    log_path: Path

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def hashed(key: str) -> str:
    """A key as a config's ``keys`` list holds it."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def sim_model(name: str, ability: float, price: float, tpot_ms: float = 2,
              prefill_tokens_per_s: float = 200_000, **simulate: object) -> dict:
    """An in-process simulated model: its quality (``ability``), price per Mtok
    (output twice input) and simulator settings (``invalid_json_rate``, ...)."""
    return {"name": name, "backend": "simulated", "ability": ability,
            "price": {"input_per_mtok": price, "output_per_mtok": 2 * price},
            "simulate": {"tpot_ms": tpot_ms, "prefill_tokens_per_s": prefill_tokens_per_s,
                         "seed": 7, "output_tokens_mean": 12, **simulate}}


def base_config(sim_url: str, **overrides: object) -> dict:
    """A gateway config: in-process and HTTP-simulated models, two teams."""
    def remote(name: str, upstream: str, price: float, **kw: object) -> dict:
        return {"name": name, "backend": "openai_compat", "base_url": sim_url,
                "upstream_model": upstream, "price": {"input_per_mtok": price,
                                                      "output_per_mtok": price * 2}, **kw}

    config = {
        "models": [
            remote("fast", "default", 0.2, context_window=4096, max_output_tokens=1024),
            remote("strong", "default", 2.0, context_window=16384, max_output_tokens=2048),
            remote("broken", "error", 50.0),
            remote("hangs", "timeout", 50.0, timeouts={"connect_s": 1, "first_byte_s": 1,
                                                       "between_chunks_s": 1, "total_s": 1}),
            remote("drops", "drop", 50.0),
            remote("echo", "echo", 50.0),
            remote("slowpoke", "slow", 50.0),
            {"name": "local", "backend": "simulated", "price": {"input_per_mtok": 0.5,
                                                                 "output_per_mtok": 0.5},
             "simulate": {"tpot_ms": 2, "prefill_tokens_per_s": 100000}},
        ],
        "teams": [
            {"name": "test", "keys": [hashed(TEST_KEY)], "quality": 0.8},
            {"name": "other", "keys": [hashed(OTHER_KEY)], "allowed_models": ["fast"]},
        ],
        "redis_url": "redis://127.0.0.1:6379/0",
        # The tests of fallbacks and faults pick their models by price alone.
        "routing": {"auto_policy": "cheapest"},
        "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
        "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}"},
        "max_body_bytes": 65536,
    }
    config.update(overrides)
    return config


@contextlib.contextmanager
def run_gateway(config: dict, *, workers: int = 1, env: dict[str, str] | None = None,
                serve_args: tuple[str, ...] = ()) -> Iterator[Gateway]:
    """``routegate serve`` on a free port with ``config``; stops it afterwards.

    ``serve_args`` are extra flags, e.g. ``("--header-timeout", "1")``.
    """
    tmp = Path(tempfile.mkdtemp(prefix="rg-test-"))
    config = {"data_dir": str(tmp / "data"), **config}
    path = tmp / "routegate.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp / "gateway.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port",
             str(port), "--workers", str(workers), *serve_args],
            env=child_env(**(env or {})), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    gw = Gateway(f"http://127.0.0.1:{port}", proc, path, log_path)
    passed = False
    try:
        wait_http(gw.url + "/healthz", proc)
        yield gw
        passed = True
    finally:
        stop(proc)
        if passed:      # a failed test keeps its directory: the gateway's log is there
            shutil.rmtree(tmp, ignore_errors=True)
