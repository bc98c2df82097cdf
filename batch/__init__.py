"""The Batch API's storage and execution, below the gateway (it imports ``core`` only).

    files = FileStore(redis, keys, DirectoryBlobStore(root))   # uploads, outputs, quota, expiry
    batches = BatchStore(redis, keys)                          # metadata and state
    worker = BatchWorker(batches, files, WorkQueue(redis, keys), run_line, settings, consumer)

``run_line`` is injected by the gateway (``gateway/batch_runner.py``).
"""

from batch.blobs import BlobStore, DirectoryBlobStore
from batch.files import FileStore
from batch.keys import BatchKeys
from batch.queue import WorkQueue
from batch.records import Owner
from batch.store import BatchStore
from batch.worker import BatchWorker, LineAnswer, RunLine

__all__ = ["BatchKeys", "BatchStore", "BatchWorker", "BlobStore", "DirectoryBlobStore",
           "FileStore", "LineAnswer", "Owner", "RunLine", "WorkQueue"]
