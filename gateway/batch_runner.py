"""The Batch API's wiring into the gateway: stores for the routes, the worker, ``run_line``.

    service = await open_batch_service(gw)     # in AppState.start
    gw.batch.files.get(owner, file_id)         # the routes
    await service.aclose()                     # in AppState.aclose

Each batch line runs through ``gateway.pipeline.serve.run_line``: the same
parse, classify, route, reserve, call-with-fallback and settle as a live
request, in the batch pool at the batch price, as the key that created the
batch. ``routegate worker`` runs the worker without the HTTP server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from batch import (
    BatchKeys,
    BatchStore,
    BatchWorker,
    DirectoryBlobStore,
    FileStore,
    LineAnswer,
    WorkQueue,
)
from batch.blob_probe import SharedStoreProbe
from batch.blobs import BlobStore, ReadThroughBlobStore
from batch.records import LineRun, Owner
from budget.redis_client import sync_redis
from core.config import GatewayConfig
from core.errors import AuthenticationFailed, NotFound, ServiceUnavailable
from scheduling.fleet import replicas_key

if TYPE_CHECKING:
    from gateway.state import AppState, Classifiers

log = logging.getLogger("routegate.batch")


@dataclass
class BatchService:
    files: FileStore
    batches: BatchStore
    queue: WorkQueue
    worker: BatchWorker | None = None
    task: asyncio.Task[None] | None = None
    # For a local blob store: whether the other live replicas share it.
    probe: SharedStoreProbe | None = None
    probe_task: asyncio.Task[None] | None = None

    def refusal(self) -> str | None:
        """Why this replica must not take batch work now, or None."""
        return self.probe.problem if self.probe is not None else None

    def refuse_if_unshared(self) -> None:
        """Uploads and new batches are refused where other replicas could not read them."""
        if problem := self.refusal():
            raise ServiceUnavailable(problem, code="blob_store_not_shared")

    def start_worker(self, gw: AppState) -> None:
        if self.worker is not None:
            return
        consumer = f"{gw.replica_id}-{os.urandom(3).hex()}"
        self.worker = BatchWorker(self.batches, self.files, self.queue, line_runner(gw),
                                  gw.config.batch, consumer, refusal=self.refusal)
        self.task = asyncio.create_task(self.worker.run())

    async def aclose(self) -> None:
        if self.worker is not None:
            await self.worker.aclose()
        for task in (self.task, self.probe_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


def line_runner(gw: AppState) -> Any:
    """``run_line`` for the worker: one batch line as a request of the batch's key."""
    from gateway.pipeline.serve import run_line as run_pipeline_line  # late: it sits above

    async def run_line(owner: Owner, url: str, body: dict[str, Any], run: LineRun) -> LineAnswer:
        caller = gw.keyring.lookup(owner.team, owner.key_hash)
        if caller is None:
            exc = AuthenticationFailed("The API key that created this batch no longer exists.")
            return LineAnswer(exc.status_code, exc.to_dict())
        door = gw.doors.get(url)
        if door is None:
            missing = NotFound(f"This gateway does not serve {url}.")
            return LineAnswer(missing.status_code, missing.to_dict())
        # The line's stable id: a line run again after a crash is billed once, for the
        # run whose answer is recorded (the latest generation).
        status, raw, headers = await run_pipeline_line(gw, caller, door, body, pool="batch",
                                                       request_id=run.id,
                                                       run_order=run.generation)
        return LineAnswer(status, orjson.loads(raw), headers)

    return run_line


async def open_batch_service(gw: AppState) -> BatchService | None:
    """The Batch API's stores on the gateway's Redis; starts the worker if configured."""
    settings = gw.config.batch
    if not settings.enabled or gw.redis is None:
        return None
    keys = BatchKeys(settings.key_prefix)
    redis = gw.redis.client
    older = Path(gw.config.data_dir) / "files"
    kind, blobs = open_blob_store(gw, older_files=await asyncio.to_thread(_has_files, older))
    log.info("batch: file bytes in %s", blobs.describe())
    files = FileStore(redis, keys, blobs, quota_bytes=settings.team_storage_bytes,
                      default_expiry_s=settings.file_expiry_s)
    service = BatchService(files, BatchStore(redis, keys), WorkQueue(redis, keys))
    if kind == "local":
        service.probe = SharedStoreProbe(redis, blobs, keys, replica=gw.replica_id,
                                         replicas_key=replicas_key(gw.config.budget.key_prefix))
        service.probe_task = asyncio.create_task(service.probe.run())
    if settings.worker_in_serve:
        service.start_worker(gw)
    return service


def _has_files(directory: Path) -> bool:
    return directory.is_dir() and any(directory.iterdir())


def open_blob_store(gw: AppState, *, older_files: bool = False) -> tuple[str, BlobStore]:
    """``batch.blob_store``: auto is redis (``storage.redis_url``'s, else the budget's),
    unless the only Redis is the embedded one."""
    settings, replica = gw.config.batch, gw.replica_id
    kind = settings.blob_store
    if kind == "auto":      # a Redis every replica reaches: the storage one, else the budget's
        kind = "redis" if gw.storage is not None or (
            gw.redis is not None and gw.redis.embedded is None) else "local"
    if kind == "s3":
        from batch.blob_s3 import S3BlobStore

        s3 = settings.s3
        assert s3 is not None   # the config's validator
        return kind, S3BlobStore(s3.bucket, prefix=s3.prefix, endpoint_url=s3.endpoint_url,
                                 region=s3.region, replica=replica)
    local = DirectoryBlobStore(Path(gw.config.data_dir) / "files", replica=replica)
    if kind == "redis" and gw.redis is not None:
        from batch.blob_redis import RedisBlobStore

        bulk = gw.bulk
        store: BlobStore = RedisBlobStore(sync_redis(bulk.url, bulk.cluster),
                                          settings.key_prefix,
                                          chunk_bytes=settings.blob_chunk_bytes, replica=replica)
        if settings.blob_store == "auto" and older_files:
            # Upgraded from the local store: its files stay readable until they expire.
            store = ReadThroughBlobStore(store, local)
        return kind, store
    return "local", local


def batch_service(gw: AppState) -> BatchService:
    """For the routes: the service, or 404 when the Batch API is off."""
    service: BatchService | None = getattr(gw, "batch", None)
    if service is None:
        raise NotFound("The Batch API is not enabled on this gateway.")
    return service


async def run_worker(config: GatewayConfig, config_path: str | None = None,
                     checked: Classifiers | None = None) -> None:
    """``routegate worker``: the batch worker alone, until SIGTERM or SIGINT.

        routegate worker --config config/routegate.yaml
    """
    from gateway.state import AppState

    gw = await AppState.start(config, config_path, checked)   # the config check's
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        service = batch_service(gw)
        service.start_worker(gw)
        log.info("batch worker %s running", gw.replica_id)
        await stop.wait()
    finally:
        await gw.aclose()
