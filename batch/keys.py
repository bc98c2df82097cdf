"""Every Redis key of the batch subsystem, in one place.

    keys = BatchKeys("rgb")
    keys.meta("batch_ab12")      # rgb:{batch_ab12}:meta

All keys of one batch share the hash tag ``{<batch id>}``, and all of a
team's file keys (each file, the team's file index, its storage count and
upload reservations) share ``{team:<team>}``, so every Lua script runs on a
Redis Cluster too. The work queue is one stream with one consumer group that
every replica reads from; ``files_due`` is one sorted set the sweepers share.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "workers"


@dataclass(frozen=True, slots=True)
class BatchKeys:
    prefix: str

    def file(self, team: str, file_id: str) -> str:
        return f"{self.prefix}:{{team:{team}}}:file:{file_id}"

    def team_files(self, team: str) -> str:
        """The team's visible files, by creation time (what ``GET /v1/files`` pages)."""
        return f"{self.prefix}:{{team:{team}}}:files"

    def storage(self, team: str) -> str:
        """Hash: ``used`` (bytes of stored files) and ``reserved`` (uploads under way)."""
        return f"{self.prefix}:{{team:{team}}}:storage"

    def reservations(self, team: str) -> str:
        """Uploads under way: ``<file id>:<bytes>`` scored by when the hold lapses."""
        return f"{self.prefix}:{{team:{team}}}:reservations"

    @property
    def files_due(self) -> str:
        """``<team>/<file id>`` scored by when the sweep should remove it."""
        return f"{self.prefix}:files:due"

    def team_batches(self, team: str) -> str:
        return f"{self.prefix}:team:{team}:batches"

    def meta(self, batch_id: str) -> str:
        return f"{self.prefix}:{{{batch_id}}}:meta"

    def results(self, batch_id: str) -> str:
        return f"{self.prefix}:{{{batch_id}}}:results"

    def runs(self, batch_id: str) -> str:
        """Hash: custom_id -> how many runs of the line have started (the last one's
        generation: only it may record the line's answer)."""
        return f"{self.prefix}:{{{batch_id}}}:runs"

    def fallbacks(self, batch_id: str) -> str:
        """Hash: custom_id -> "<generation> <input> <output> <result>": a good answer
        refused because a later run started, kept in case that run has none."""
        return f"{self.prefix}:{{{batch_id}}}:fallbacks"

    def finalizer(self, batch_id: str) -> str:
        return f"{self.prefix}:{{{batch_id}}}:finalizer"

    @property
    def queue(self) -> str:
        return f"{self.prefix}:queue"

    @property
    def active(self) -> str:
        """Batch ids not yet in a terminal state: what the sweepers look at."""
        return f"{self.prefix}:active"

    @property
    def blob_probes(self) -> str:
        """Hash: replica id -> the probe blob it wrote (``blob_probe.py``)."""
        return f"{self.prefix}:blob:probes"
