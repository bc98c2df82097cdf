"""The servers of the proxy benchmark, each its own process on loopback.

    with start_targets(["direct", "bare-aiohttp", "routegate"], tmp, "url", None) as urls:
        urls["routegate"]      # http://127.0.0.1:PORT/v1/chat/completions

Every target sits in front of one stub upstream (``loadtest/stub_upstream.py``).
routegate runs as ``routegate serve`` with ``loadtest/routegate.yaml``, rewritten
per run to the stub's port and a scratch ``data_dir``.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from loadtest.servers import REPO, child_env, free_port, stop, wait_http

HERE = Path(__file__).resolve().parent
KEY = "sk-bench-key"     # its hash is the team key in loadtest/routegate.yaml

# routegate variants, to split its cost: (log level, config overrides).
ROUTEGATE_VARIANTS: dict[str, tuple[str, dict]] = {
    "routegate": ("info", {}),
    "routegate-quiet": ("warning", {}),
    "routegate-nobudget": ("warning", {"budget": {"enabled": False}}),
    # Request log and metrics off: what telemetry costs is routegate minus this.
    "routegate-nolog": ("info", {"logging": {"requests": False}, "metrics": {"enabled": False}}),
    # Cache-blind routing: what the warm-prefix record costs is routegate minus this.
    "routegate-nocache": ("info", {"routing": {"cache_aware": False}}),
}


@contextlib.contextmanager
def running(args: list[str], ready_url: str, log: Path, *, timeout: float = 30.0,
            stop_s: float = 10.0, wrapper: tuple[str, ...] = ()
            ) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m *args`` in its own session, logging to ``log``; yields the
    process once ``ready_url`` answers, and stops it (SIGTERM, then kill) after.
    ``wrapper``: a command that runs Python (``valgrind --tool=callgrind ...``)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([*wrapper, sys.executable, "-m", *args], cwd=REPO, env=child_env(),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(ready_url, proc, timeout=timeout)
        yield proc
    finally:
        stop(proc, timeout=stop_s)


@contextlib.contextmanager
def server(args: list[str], ready_path: str, port: int, log: Path) -> Iterator[str]:
    """A Python server process; yields its base URL once ``ready_path`` answers."""
    base = f"http://127.0.0.1:{port}"
    with running(args, base + ready_path, log):
        yield base


def target_command(name: str, stub: str, port: int, tmp: Path, redis: str = "url",
                   classifier: str | None = None) -> tuple[list[str], str]:
    """A bare proxy's or a routegate variant's ``python -m`` arguments, and its ready path."""
    if name.startswith("bare-"):
        return (["loadtest.bare_proxy", "--port", str(port), "--upstream", stub,
                 "--client", name.removeprefix("bare-")], "/health")
    config = routegate_config(stub, tmp, name, redis, classifier)
    return (["gateway.cli", "serve", "--config", str(config), "--port", str(port),
             "--log-level", ROUTEGATE_VARIANTS[name][0]], "/healthz")


def routegate_config(stub: str, tmp: Path, name: str, redis: str, classifier: str | None) -> Path:
    """loadtest/routegate.yaml, pointed at this run's stub and a scratch data_dir."""
    config = yaml.safe_load((HERE / "routegate.yaml").read_text())
    for section, values in ROUTEGATE_VARIANTS[name][1].items():
        config[section] = {**config.get(section, {}), **values}
    config["models"][0]["base_url"] = stub + "/v1"
    config["data_dir"] = str(tmp / "routegate-data")
    if redis == "embedded":
        config["redis_url"] = None
    if classifier:
        config.setdefault("routing", {})["classifier"] = str(Path(classifier).resolve())
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def wait_classifier(base: str, timeout: float = 120.0) -> str | None:
    """Wait until a gateway's classifier has settled on its score (``/readyz``: compiled,
    or numpy; numpy scores while the compiled one is ``building``, 5-8 s on a machine's
    first start): measure what it serves once started. Its path, or None without one."""
    deadline = time.monotonic() + timeout
    while True:
        state = httpx.get(base + "/readyz", timeout=30).json().get("classifier")
        if state != "building" or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


@contextlib.contextmanager
def start_targets(names: list[str], tmp: Path, redis: str,
                  classifier: str | None) -> Iterator[dict[str, str]]:
    """Start the stub and each named target; yields name -> chat completions URL."""
    with contextlib.ExitStack() as stack:
        port = free_port()
        stub = stack.enter_context(server(["loadtest.stub_upstream", "--port", str(port)],
                                          "/health", port, tmp / "stub.log"))
        urls = {}
        for name in names:
            port = free_port()
            if name == "direct":
                base = stub
            else:
                command, ready = target_command(name, stub, port, tmp, redis, classifier)
                base = stack.enter_context(server(command, ready, port, tmp / f"{name}.log"))
                wait_classifier(base)
            urls[name] = base + "/v1/chat/completions"
        yield urls
