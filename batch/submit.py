"""Creating a batch: record it, hold its input file, put one stream entry per line, then
open it to workers.

    batch_id = await submit_batch(files, batches, queue, owner, input_file_fields,
                                  window="24h", window_s=86400, metadata=None,
                                  output_expires_s=None)

The batch stays ``validating`` while its lines are enqueued, and workers that
meet its lines wait, so none starts before the batch is whole. A creator that
dies before the end leaves it ``validating``; the sweepers then fail it. The
batch holds its input file until it ends, so the file's bytes outlive a
delete or an expiry while the batch still reads them.
"""

from __future__ import annotations

import asyncio
import time

from batch.files import FileStore
from batch.jsonl import Line, scan_lines
from batch.queue import WorkQueue
from batch.records import Owner
from batch.store import BatchStore
from core.errors import NotFound


async def submit_batch(files: FileStore, batches: BatchStore, queue: WorkQueue, owner: Owner,
                       input_file: dict[str, str], *, window: str, window_s: int,
                       metadata: dict[str, str] | None, output_expires_s: int | None = None
                       ) -> str:
    file_id = input_file["id"]
    batch_id = await batches.create(owner, input_file, window=window, window_s=window_s,
                                    metadata=metadata, now=time.time(),
                                    output_expires_s=output_expires_s)
    # The batch exists before it holds the file: a holder whose batch is
    # missing is one that died, and the sweep may let the file go.
    if not await files.retention.hold(owner.team, file_id, batch_id, time.time()):
        await batches.discard(owner, batch_id)
        raise NotFound(f"No such File object: {file_id}", param="input_file_id")

    def lines() -> list[tuple[int, Line]]:
        with files.blobs.open(file_id) as f:
            return list(enumerate(scan_lines(f)))

    await queue.ensure_group()
    await queue.enqueue(batch_id, await asyncio.to_thread(lines))
    await batches.transition(batch_id, ("validating",), "in_progress",
                             in_progress_at=int(time.time()))
    return batch_id
