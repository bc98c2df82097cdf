"""Parent of the embedded redis-server; stops it when no gateway process is left.

Run by ``embedded.py`` as a script (stdlib only, so it needs no import path):

    python _watchdog.py <redis dir> <redis-server binary> [redis-server args...]

Every gateway process using the embedded server holds a shared flock on
``<redis dir>/users.lock`` for as long as it runs; the kernel drops that lock
when the process exits, however it exits (kill -9 included). Twice a second
the watchdog, holding ``start.lock`` so no gateway can be starting at that
moment, tries to take ``users.lock`` exclusively: once it can, nobody uses
the server any more, and it stops it (SIGTERM: Redis flushes its AOF).
The server gets SIGTERM too if the watchdog itself dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the watchdog still stops the server on a clean exit


def _nobody_left(users: Path) -> bool:
    fd = os.open(users, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if we got it
    return True


def _locked(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def main(argv: list[str]) -> int:
    redis_dir, binary, *args = argv
    directory = Path(redis_dir)
    server = subprocess.Popen([binary, *args], preexec_fn=_die_with_parent)
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    while server.poll() is None:
        time.sleep(POLL_S)
        start_fd = _locked(directory / "start.lock")
        try:
            if _nobody_left(directory / "users.lock"):
                server.terminate()
                server.wait(timeout=30)
                (directory / "redis.sock").unlink(missing_ok=True)
                break
        finally:
            os.close(start_fd)
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
