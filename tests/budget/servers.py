"""Real Redis servers that budget tests start, stop, kill and restart.

with RedisServer(tmp_path) as server:       # a redis-server on a free port
    server.kill()                           # SIGKILL: the store sees "refused"
    server.start()                          # same port, same AOF: data is back

with RedisClusterNodes(tmp_path, 3) as cluster:   # 3 masters, all slots covered
    cluster.url                                   # "redis+cluster://127.0.0.1:<port>"
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

REDIS_SERVER = "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else "redis-server"
REDIS_CLI = shutil.which("redis-cli", path="/usr/bin") or "redis-cli"


def free_port(also_free_offset: int = 0) -> int:
    """A free loopback port (and port + offset free too, for cluster bus ports)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + also_free_offset > 65535:
            continue
        if also_free_offset == 0 or _is_free(port + also_free_offset):
            return port
    raise RuntimeError("no free port pair")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server with an fsync-always AOF, so kill -9 loses nothing."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port(10000 if "--cluster-enabled" in extra else 0)
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            REDIS_SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--logfile",
            str(self.directory / "redis.log"),
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not _answers(self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on {self.port} did not start")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def pause(self) -> None:
        """SIGSTOP: connections hang instead of being refused (a black hole)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.kill()


class RedisClusterNodes:
    """``n`` cluster-enabled nodes joined with ``redis-cli --cluster create``: masters, or
    with ``replicas`` that many replicas per master (``n`` counts them all)."""

    def __init__(self, directory: Path, n: int = 3, replicas: int = 0) -> None:
        self.replicas = replicas
        self.nodes = [
            RedisServer(
                directory / f"node{i}",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(directory / f"node{i}" / "nodes.conf"),
                "--cluster-node-timeout",
                "2000",
            )
            for i in range(n)
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def __enter__(self) -> RedisClusterNodes:
        try:
            for node in self.nodes:
                node.start()
            addrs = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run(
                [REDIS_CLI, "--cluster", "create", *addrs, "--cluster-replicas", str(self.replicas),
                 "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=30,
            )
            self._wait_ok()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_ok(self) -> None:
        """Until every node says ok AND all agree on the slot map (no MOVED storms), and,
        with replicas, every replica has synced with its master: one that has not yet
        (its first full sync, slow on a busy machine) never takes over from it."""
        deadline = time.monotonic() + 20
        _until(deadline, ["--cluster", "check", f"127.0.0.1:{self.nodes[0].port}"],
               lambda out: "All nodes agree" in out and "All 16384 slots covered" in out,
               "cluster not consistent")
        for node in self.nodes:
            _until(deadline, ["-p", str(node.port), "cluster", "info"],
                   lambda out: "cluster_state:ok" in out, "cluster not ok")
        for node in self.nodes if self.replicas else ():
            _until(deadline, ["-p", str(node.port), "info", "replication"],
                   lambda out: "role:master" in out or "master_link_status:up" in out,
                   "replica not in sync")

    def __exit__(self, *exc: object) -> None:
        for node in self.nodes:
            node.kill()


def _until(deadline: float, args: list[str], ok: Callable[[str], bool], what: str) -> None:
    """Ask ``redis-cli args`` every 0.1 s until ``ok(its output)``, at most until
    ``deadline`` (then ``what`` and the last output are the error)."""
    while True:
        out = subprocess.run([REDIS_CLI, *args], capture_output=True, text=True,
                             timeout=5).stdout
        if ok(out):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {out}")
        time.sleep(0.1)
