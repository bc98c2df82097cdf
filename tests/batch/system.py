"""A batch system on the shared Redis for package tests: stores, queue, workers."""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio

from batch import BatchKeys, BatchStore, BatchWorker, DirectoryBlobStore, FileStore, WorkQueue
from batch.records import LineRun, Owner
from batch.submit import submit_batch
from batch.worker import LineAnswer, RunLine
from core.batch_config import BatchSettings

OWNER = Owner("team-a", "sha256:" + "a" * 64)


def chat_line(custom_id: str, content: str = "hi") -> bytes:
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "m", "messages": [{"role": "user", "content": content}]}})


async def echo_line(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
    """A deterministic stand-in upstream: 400 for content 'bad', else an echo."""
    content = body["messages"][0]["content"]
    if content == "bad":
        return LineAnswer(400, {"error": {"message": "bad", "type": "invalid_request_error",
                                          "param": None, "code": "bad"}})
    return LineAnswer(200, {"id": run.id, "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})


@dataclass
class System:
    redis: Any
    settings: BatchSettings
    root: Path
    files: FileStore = field(init=False)
    batches: BatchStore = field(init=False)
    queue: WorkQueue = field(init=False)
    workers: list[tuple[BatchWorker, asyncio.Task[None]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        keys = BatchKeys(self.settings.key_prefix)
        self.files = FileStore(self.redis, keys, DirectoryBlobStore(self.root),
                               quota_bytes=self.settings.team_storage_bytes,
                               default_expiry_s=self.settings.file_expiry_s)
        self.batches = BatchStore(self.redis, keys)
        self.queue = WorkQueue(self.redis, keys)

    def start_worker(self, run_line: RunLine = echo_line, name: str = "w") -> BatchWorker:
        worker = BatchWorker(self.batches, self.files, WorkQueue(self.redis, self.files.keys),
                             run_line, self.settings, consumer=f"{name}-{len(self.workers)}")
        self.workers.append((worker, asyncio.create_task(worker.run())))
        return worker

    async def submit(self, lines: list[bytes], window: str = "24h", window_s: int = 86400) -> str:
        data = b"\n".join(lines) + b"\n"
        fields = await self.files.create(OWNER, "in.jsonl", "batch", io.BytesIO(data),
                                         lines=len(lines))
        return await submit_batch(self.files, self.batches, self.queue, OWNER, fields,
                                  window=window, window_s=window_s, metadata={"k": "v"})

    async def wait_status(self, batch_id: str, statuses: set[str], timeout: float = 30
                          ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            batch = await self.batches.get(OWNER, batch_id)
            if batch["status"] in statuses:
                return batch
            if loop.time() > deadline:
                raise TimeoutError(f"batch stuck in {batch['status']}: {batch}")
            await asyncio.sleep(0.05)

    def content(self, file_id: str | None) -> list[dict[str, Any]]:
        if file_id is None:
            return []
        with self.files.blobs.open(file_id) as f:
            return [orjson.loads(line) for line in f.read().splitlines()]

    async def aclose(self) -> None:
        for worker, task in self.workers:
            await worker.aclose()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.redis.aclose()


def make_system(prefix: str, root: Path, **settings: Any) -> System:
    defaults: dict[str, Any] = {"key_prefix": prefix, "poll_interval_s": 0.02,
                                "sweep_interval_s": 0.1, "claim_interval_s": 0.3,
                                "claim_idle_s": 1.0, "drain_grace_s": 1.0}
    defaults.update(settings)
    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:6379/0")
    return System(client, BatchSettings(**defaults), root)
