"""Serves the demo config once while the image is built: /readyz, one chat, then stop.

    python deploy/container/warm_up.py config/routegate.yaml

The Dockerfile installs with ``PIP_NO_COMPILE`` and drops every ``__pycache__``:
pip would write bytecode for all of every dependency (130 MB, mostly training
and plotting libraries that serving never imports). This run writes it for the
modules that starting and answering a request do import, so the container
starts as fast as a full install would. It also stops the build when the
installed package cannot serve its own demo config. Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

READY_TIMEOUT_S = 120.0
DEMO_KEY = "sk-routegate-demo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"warm_up: routegate serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"warm_up: {base}/readyz not ready after {READY_TIMEOUT_S:.0f} s")


def chat(base: str) -> str:
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(f"{base}/v1/chat/completions", data=body, headers={
        "authorization": f"Bearer {DEMO_KEY}", "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(json.load(answer)["choices"][0]["message"]["content"])


def main(config: str) -> int:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as data_dir:
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", os.path.abspath(config),
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
            cwd=data_dir, env=env)   # the config's relative data_dir lands in the temp dir
        try:
            wait_ready(base, server)
            print(f"warm_up: ready; chat answered {chat(base)[:40]!r}")
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
