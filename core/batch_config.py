"""The ``batch:`` section of the gateway YAML (the Batch API, ``batch/``).

    batch:
      worker_in_serve: true     # false: run ``routegate worker`` separately
      concurrency: 8            # lines in flight per replica
      claim_idle_s: 30          # a line held this long by a silent worker is taken over
      team_storage_bytes: 10737418240   # all of a team's stored files, uploads and outputs
      file_expiry_s: 2592000    # files that name no expires_after; null or 0: never

Every replica sharing a Redis must use the same ``key_prefix`` and see the
same ``data_dir`` (the file bytes live in ``<data_dir>/files``).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from core.strict import Strict


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
    team_storage_bytes: int = Field(default=10 * 1024**3, ge=1024)
    # Lifetime of a file that names no ``expires_after`` (uploads) or
    # ``output_expires_after`` (a batch's output and error files). OpenAI's
    # default for batch files is 30 days; null or 0: kept until deleted.
    file_expiry_s: int | None = Field(default=30 * 86400, ge=0)
    # Files each replica's sweep deletes per pass (expired, or deleted while a
    # batch still read them), so a backlog never stalls the sweep loop.
    expiry_sweep_limit: int = Field(default=100, ge=1, le=10_000)

    @model_validator(mode="after")
    def _claims_outlast_heartbeats(self) -> BatchSettings:
        if self.claim_interval_s > self.claim_idle_s:
            raise ValueError("claim_interval_s must not exceed claim_idle_s")
        return self
