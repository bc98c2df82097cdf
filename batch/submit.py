"""Creating a batch: record it, put one stream entry per line, then open it to workers.

    batch_id = await submit_batch(files, batches, queue, owner, input_file_fields,
                                  window="24h", window_s=86400, metadata=None)

The batch stays ``validating`` while its lines are enqueued, and workers that
meet its lines wait, so none starts before the batch is whole. A creator that
dies before the end leaves it ``validating``; the sweepers then fail it.
"""

from __future__ import annotations

import asyncio
import time

from batch.files import FileStore
from batch.jsonl import Line, scan_lines
from batch.queue import WorkQueue
from batch.records import Owner
from batch.store import BatchStore


async def submit_batch(files: FileStore, batches: BatchStore, queue: WorkQueue, owner: Owner,
                       input_file: dict[str, str], *, window: str, window_s: int,
                       metadata: dict[str, str] | None) -> str:
    batch_id = await batches.create(owner, input_file, window=window, window_s=window_s,
                                    metadata=metadata, now=time.time())

    def lines() -> list[tuple[int, Line]]:
        with files.blobs.open(input_file["id"]) as f:
            return list(enumerate(scan_lines(f)))

    await queue.ensure_group()
    await queue.enqueue(batch_id, await asyncio.to_thread(lines))
    await batches.transition(batch_id, ("validating",), "in_progress",
                             in_progress_at=int(time.time()))
    return batch_id
