"""open_redis(None, data_dir): one embedded redis-server shared by every gateway process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from budget.redis_client import open_redis
from core.budget_config import Limits
from tests.budget.conftest import make_store

REPO = Path(__file__).resolve().parents[2]

# A second "gateway worker": joins the embedded server, records its pid, holds
# the lease until killed (or until told to exit by a closed stdin).
WORKER = """
import asyncio, sys
from pathlib import Path
from budget.redis_client import open_redis

async def main():
    handle = await open_redis(None, Path(sys.argv[1]))
    info = await handle.client.info("server")
    await handle.client.incr("workers")
    print(info["process_id"], flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await handle.close()

asyncio.run(main())
"""


def _server_pid(data_dir: Path) -> int:
    async def main() -> int:
        handle = await open_redis(None, data_dir)
        try:
            return int((await handle.client.info("server"))["process_id"])
        finally:
            await handle.close()

    return asyncio.run(main())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, timeout: float = 8.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _worker(data_dir: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_embedded_server_runs_the_store_and_persists(tmp_path: Path) -> None:
    async def main() -> None:
        handle = await open_redis(None, tmp_path)
        assert handle.embedded is not None and not handle.cluster
        store = make_store(handle.client, "rg", tmp_path)
        res = await store.reserve(
            request_id="a",
            team="t",
            team_limits=Limits(daily_hard_usd=1),
            key_id=None,
            key_limits=None,
            model="m",
            max_cost_nanousd=100,
            max_tokens=10,
        )
        await store.settle(res, input_tokens=1, output_tokens=1, cost_nanousd=42)
        await handle.close()

    asyncio.run(main())
    pid = _server_pid(tmp_path)  # this process's last lease: opened and closed again
    assert _wait_dead(pid)  # nobody uses the server any more: the watchdog stopped it

    async def check() -> None:  # a new server reads the AOF back
        handle = await open_redis(None, tmp_path)
        store = make_store(handle.client, "rg", tmp_path)
        assert (await store.usage("t", None))["spent_today_nanousd"] == 42
        await handle.close()

    asyncio.run(check())
    assert (tmp_path / "redis" / "appendonly.aof").exists() or (tmp_path / "redis" / "appendonlydir").exists()


def test_worker_processes_share_one_server_that_dies_with_the_last(tmp_path: Path) -> None:
    first, pid = _worker(tmp_path)
    second, pid2 = _worker(tmp_path)
    assert pid == pid2  # one server for both workers
    second.send_signal(signal.SIGKILL)  # a worker crashing does not stop it
    second.wait(5)
    assert _server_pid(tmp_path) == pid
    assert not _wait_dead(pid, timeout=1.5)
    first.send_signal(signal.SIGKILL)  # the last worker dies hard: the server follows
    first.wait(5)
    assert _wait_dead(pid)
    assert not (tmp_path / "redis" / "redis.sock").exists()
