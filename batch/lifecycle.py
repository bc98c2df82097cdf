"""Moving a batch through its states, and writing its output files once.

    validating → in_progress → finalizing → completed | expired
    validating → failed                      (its creator died before enqueueing)
    validating | in_progress → cancelling → cancelled

    lifecycle = Lifecycle(store, files, settings)
    await lifecycle.advance(batch_id)      # called by every replica's sweeper

``next_step`` is the pure rule. Finalizing takes a lock with a lease, seals
the batch (later results are refused), writes the output and error files,
and only then sets the terminal state, so two replicas never both write
them, and a finalizer that dies is replaced once its lease runs out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import orjson

from batch.blobs import BlobStore
from batch.files import FileStore
from batch.jsonl import scan_lines
from batch.records import TERMINAL, Owner, unrun_line
from batch.store import BatchStore
from core.batch_config import BatchSettings

log = logging.getLogger("routegate.batch")

# A creator that has not enqueued every line by then has died (enqueueing
# 50,000 lines takes about a second).
VALIDATING_TIMEOUT_S = 120
UNRUN = {"expired": ("batch_expired",
                     "This request could not be executed before the completion window expired."),
         "cancelled": ("batch_cancelled", "This request was not executed: the batch was cancelled.")}


def next_step(fields: dict[str, str], now: float, settings: BatchSettings) -> str | None:
    """What a batch needs next: fail, complete, expire, finalize, or nothing."""
    status = fields.get("status")
    done = int(fields.get("completed", 0)) + int(fields.get("failed", 0))
    total = int(fields.get("total", 0))
    if status == "validating" and now - int(fields["created_at"]) > VALIDATING_TIMEOUT_S:
        return "fail"
    if status == "in_progress":
        if done >= total:
            return "complete"
        if now >= int(fields["expires_at"]):
            return "expire"
    if status in ("finalizing", "cancelling"):
        since = int(fields.get("cancelling_at") or fields.get("finalizing_at") or 0)
        drained = int(fields.get("inflight", 0)) <= 0 or now - since >= settings.drain_grace_s
        if done >= total or drained or fields.get("sealed") == "1":
            return "finalize"
    return None


def assemble(results: dict[str, bytes], unrun: list[bytes]) -> tuple[bytes, bytes]:
    """(output file, error file): results in input order, then lines never run."""
    rows = []
    for value in results.values():
        index, kind, line = value.split(b"\t", 2)
        rows.append((int(index), kind, line))
    rows.sort()
    output = b"".join(line + b"\n" for _, kind, line in rows if kind == b"o")
    errors = b"".join(line + b"\n" for _, kind, line in rows if kind == b"e")
    return output, errors + b"".join(line + b"\n" for line in unrun)


def unrun_lines(blobs: BlobStore, batch_id: str, file_id: str, done: set[str], target: str
                ) -> list[bytes]:
    """Error lines for the input lines that never ran (read from the input file).

    A missing input raises ``BlobMissing``: the finalizer lets go, and a
    replica that reads the store finalizes, so no line goes unlisted.
    """
    code, message = UNRUN[target]
    out = []
    with blobs.open(file_id) as f:
        for line in scan_lines(f):
            custom_id = orjson.loads(line.raw)["custom_id"]
            if custom_id not in done:
                out.append(unrun_line(batch_id, custom_id, code, message))
    return out


class Lifecycle:
    def __init__(self, store: BatchStore, files: FileStore, settings: BatchSettings) -> None:
        self.store = store
        self.files = files
        self.settings = settings

    async def advance(self, batch_id: str) -> None:
        """Take every step the batch needs now (idempotent; any replica may call it)."""
        for _ in range(3):
            fields = await self.store.fields(batch_id)
            if not fields or fields.get("status") in TERMINAL:
                await self._retire(batch_id, fields)
                return
            now = time.time()
            step = next_step(fields, now, self.settings)
            if step is None or not await self._take(batch_id, step, int(now)):
                return

    async def _take(self, batch_id: str, step: str, now: int) -> bool:
        if step == "fail":
            errors = orjson.dumps([{"code": "batch_not_started", "line": None, "param": None,
                                    "message": "The batch was not fully enqueued."}]).decode()
            return bool(await self.store.transition(batch_id, ("validating",), "failed",
                                                    failed_at=now, errors=errors))
        if step in ("complete", "expire"):
            target = "completed" if step == "complete" else "expired"
            return bool(await self.store.transition(batch_id, ("in_progress",), "finalizing",
                                                    finalizing_at=now, target=target))
        return await self.finalize(batch_id)

    async def finalize(self, batch_id: str) -> bool:
        token = os.urandom(12).hex()
        if not await self.store.lock_finalizer(batch_id, token, self.settings.finalize_lease_s):
            return False  # another replica is at it
        try:
            fields = await self.store.seal(batch_id)
            output_id, error_id = await self._write_files(batch_id, fields)
            done = await self.store.finish(batch_id, token, output_id, error_id)
        except BaseException:
            await asyncio.shield(self.store.release_finalizer(batch_id, token))
            raise
        if done:
            await self._retire(batch_id, fields)
            log.info("batch %s: %s (%s completed, %s failed)", batch_id, fields.get("target"),
                     fields.get("completed"), fields.get("failed"))
        return done

    async def _retire(self, batch_id: str, fields: dict[str, str]) -> None:
        """The batch has ended: let go of its input file, then stop sweeping it."""
        if fields.get("input_file_id"):
            await self.files.retention.release(fields["team"], fields["input_file_id"], batch_id)
        await self.store.deactivate(batch_id)

    async def _write_files(self, batch_id: str, fields: dict[str, str]
                           ) -> tuple[str | None, str | None]:
        results = await self.store.results(batch_id)
        target = fields.get("target", "completed")
        unrun: list[bytes] = []
        if target in UNRUN:
            unrun = await asyncio.to_thread(unrun_lines, self.files.blobs, batch_id,
                                            fields["input_file_id"], set(results), target)
        output, errors = await asyncio.to_thread(assemble, results, unrun)
        owner = Owner(fields["team"], fields["key_hash"])
        # output_expires_after, else the gateway's default (FileStore applies it).
        lifetime = int(fields["output_expires_s"]) if fields.get("output_expires_s") else None
        ids: list[str | None] = []
        for kind, data in (("output", output), ("error", errors)):
            ids.append(None if not data else (await self.files.create_bytes(
                owner, f"{batch_id}_{kind}.jsonl", "batch_output", data,
                expires_after_s=lifetime))["id"])
        return ids[0], ids[1]

    async def sweep(self) -> None:
        """Advance every active batch, then remove the files whose time has come (bounded)."""
        for batch_id in await self.store.active_ids():
            try:
                await self.advance(batch_id)
            except Exception:
                log.exception("batch %s: could not advance", batch_id)
        await self.files.retention.sweep(time.time(), self.settings.expiry_sweep_limit)
