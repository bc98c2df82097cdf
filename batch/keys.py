"""Every Redis key of the batch subsystem, in one place.

    keys = BatchKeys("rgb")
    keys.meta("batch_ab12")      # rgb:{batch_ab12}:meta

All keys of one batch share the hash tag ``{<batch id>}``, so its Lua scripts
run on a Redis Cluster too. The work queue is one stream with one consumer
group that every replica reads from.
"""

from __future__ import annotations

from dataclasses import dataclass

GROUP = "workers"


@dataclass(frozen=True, slots=True)
class BatchKeys:
    prefix: str

    def file(self, file_id: str) -> str:
        return f"{self.prefix}:file:{file_id}"

    def team_files(self, team: str) -> str:
        return f"{self.prefix}:team:{team}:files"

    def team_batches(self, team: str) -> str:
        return f"{self.prefix}:team:{team}:batches"

    def meta(self, batch_id: str) -> str:
        return f"{self.prefix}:{{{batch_id}}}:meta"

    def results(self, batch_id: str) -> str:
        return f"{self.prefix}:{{{batch_id}}}:results"

    def finalizer(self, batch_id: str) -> str:
        return f"{self.prefix}:{{{batch_id}}}:finalizer"

    @property
    def queue(self) -> str:
        return f"{self.prefix}:queue"

    @property
    def active(self) -> str:
        """Batch ids not yet in a terminal state: what the sweepers look at."""
        return f"{self.prefix}:active"
