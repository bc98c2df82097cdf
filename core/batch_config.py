"""The ``batch:`` section of the gateway YAML (the Batch API, ``batch/``).

    batch:
      worker_in_serve: true     # false: run ``routegate worker`` separately
      concurrency: 8            # lines in flight per replica
      claim_idle_s: 30          # a line held this long by a silent worker is taken over
      team_storage_bytes: 1073741824    # all of a team's stored files, uploads and outputs
      file_expiry_s: 2592000    # files that name no expires_after; null or 0: never
      blob_store: auto          # where file bytes live: auto, local, redis or s3
      s3: {bucket: routegate-files, prefix: prod/, endpoint_url: http://minio:9000}

Every replica sharing a Redis must use the same ``key_prefix`` and the same
blob store. ``auto`` is ``redis`` (chunks in the gateway's Redis, which
every replica reaches) unless the Redis is the embedded one, and then
``local`` (``<data_dir>/files``: one host, or a directory every replica
mounts; a replica that cannot read what another wrote refuses batch work).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from core.strict import Strict


class S3Settings(Strict):
    """An S3-compatible bucket (AWS S3, MinIO, R2, GCS interop) for ``blob_store: s3``.

    Credentials come from boto3's chain (``AWS_ACCESS_KEY_ID``..., shared
    config, an instance role), never from this file.
    """

    bucket: str = Field(min_length=3, max_length=63)
    prefix: str = Field(default="", max_length=512)
    endpoint_url: str | None = None     # None: AWS; else MinIO, R2, GCS interop...
    region: str | None = None


class BatchSettings(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # false: /v1/files and /v1/batches answer 404 and no worker runs.
    enabled: bool = True
    # Run the batch worker inside ``routegate serve`` (the default), or only in
    # ``routegate worker`` processes.
    worker_in_serve: bool = True
    max_file_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)
    max_lines: int = Field(default=50_000, ge=1)
    # A fixed cap per replica, so a batch can never take every upstream
    # connection from interactive traffic.
    concurrency: int = Field(default=8, ge=1, le=1024)
    # How long an idle worker sleeps before asking the stream again.
    poll_interval_s: float = Field(default=0.2, gt=0, le=5)
    # How often a worker looks for lines a dead worker held.
    claim_interval_s: float = Field(default=5.0, gt=0)
    # A line pending this long without a heartbeat is taken over. Live workers
    # refresh their lines every claim_idle_s / 3, so slow lines are not stolen.
    claim_idle_s: float = Field(default=30.0, gt=0)
    # How often each replica checks active batches for expiry, cancel and
    # abandoned finalizing.
    sweep_interval_s: float = Field(default=1.0, gt=0)
    # After cancel or expiry, lines in flight get this long to finish before
    # the output files are written without them.
    drain_grace_s: float = Field(default=30.0, ge=0)
    # A line refused with 503 is tried this many more times, backing off from
    # retry_backoff_s and doubling, before the refusal goes in the error file.
    # A 429 other than insufficient_quota (a rate limit, a full queue) does not
    # use these up: the line waits its retry-after and runs again, for as long
    # as the batch's completion window and cancel allow.
    line_retries: int = Field(default=3, ge=0, le=10)
    retry_backoff_s: float = Field(default=1.0, ge=0)
    # A finalizer that has not finished in this time is presumed dead.
    finalize_lease_s: float = Field(default=120.0, gt=0)
    # Longest completion_window accepted (OpenAI accepts only "24h").
    max_completion_window_s: int = Field(default=7 * 86400, ge=1)
    key_prefix: str = Field(default="rgb", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    # Bytes of all of a team's stored files (uploads, outputs, and deleted files
    # a running batch still reads). An upload that would pass it is refused;
    # output files are always written (they are counted, never refused).
    team_storage_bytes: int = Field(default=1024**3, ge=1024)
    # Lifetime of a file that names no ``expires_after`` (uploads) or
    # ``output_expires_after`` (a batch's output and error files). OpenAI's
    # default for batch files is 30 days; null or 0: kept until deleted.
    file_expiry_s: int | None = Field(default=30 * 86400, ge=0)
    # Files each replica's sweep deletes per pass (expired, or deleted while a
    # batch still read them), so a backlog never stalls the sweep loop.
    expiry_sweep_limit: int = Field(default=100, ge=1, le=10_000)
    # Where file bytes live (the module docstring). Replicas on several hosts
    # need redis or s3.
    blob_store: Literal["auto", "local", "redis", "s3"] = "auto"
    s3: S3Settings | None = None
    # A redis blob is stored in chunks of this size (one GETRANGE each).
    blob_chunk_bytes: int = Field(default=1024 * 1024, ge=4096, le=64 * 1024 * 1024)

    @model_validator(mode="after")
    def _claims_outlast_heartbeats(self) -> BatchSettings:
        if self.claim_interval_s > self.claim_idle_s:
            raise ValueError("claim_interval_s must not exceed claim_idle_s")
        if self.blob_store == "s3" and self.s3 is None:
            raise ValueError("blob_store: s3 needs an s3: section (bucket, and endpoint_url "
                             "for a store other than AWS)")
        return self
