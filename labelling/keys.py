"""Every Redis key of the label store, in one place.

    keys = LabelKeys("rg")
    keys.labels("acme")              # rg:{lab:acme}:labels      a stream, one entry per label
    keys.served("acme", "req_ab")    # rg:{lab:acme}:served:req_ab  a hash, while feedback is taken
    keys.misses("acme")              # rg:{lab:acme}:misses     feedback misses in the window
    keys.running("acme", "req_ab")   # rg:{lab:acme}:running:req_ab  a request still running, long

All of one team's keys share the hash tag ``{lab:<team>}``, so the feedback
script (one served record, one stream, one miss count) runs on a Redis Cluster too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LabelKeys:
    prefix: str

    def labels(self, team: str) -> str:
        return f"{self.prefix}:{{lab:{team}}}:labels"

    def served(self, team: str, request_id: str) -> str:
        return f"{self.prefix}:{{lab:{team}}}:served:{request_id}"

    def misses(self, team: str) -> str:
        return f"{self.prefix}:{{lab:{team}}}:misses"

    def running(self, team: str, request_id: str) -> str:
        return f"{self.prefix}:{{lab:{team}}}:running:{request_id}"
