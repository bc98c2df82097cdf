"""File and batch objects: Redis hash fields in, OpenAI's JSON shapes out (pure).

    owner = Owner(team="search", key_hash="sha256:...")
    file_object(fields)    # -> {"id": "file-...", "object": "file", "bytes": ..., ...}
    batch_object(fields)   # -> {"id": "batch_...", "object": "batch", "status": ..., ...}
    result_line(batch_id, custom_id, 200, body)   # one line of an output or error file

Ids carry 24 random bytes, so nobody finds another team's objects by guessing.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import orjson

TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
_TIMESTAMPS = ("created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at",
               "failed_at", "expired_at", "cancelling_at", "cancelled_at")


@dataclass(frozen=True, slots=True)
class Owner:
    """Who made an object: the team sees it, the key runs its lines."""

    team: str
    key_hash: str


def new_file_id() -> str:
    return "file-" + os.urandom(24).hex()


def new_batch_id() -> str:
    return "batch_" + os.urandom(24).hex()


def decode(raw: dict[Any, Any]) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()}


def _int(fields: dict[str, str], name: str) -> int | None:
    value = fields.get(name)
    return int(value) if value not in (None, "") else None


def file_object(fields: dict[str, str]) -> dict[str, Any]:
    return {"id": fields["id"], "object": "file", "bytes": _int(fields, "bytes") or 0,
            "created_at": _int(fields, "created_at"), "expires_at": _int(fields, "expires_at"),
            "filename": fields.get("filename", ""), "purpose": fields["purpose"],
            "status": "processed", "status_details": None}


def batch_object(fields: dict[str, str]) -> dict[str, Any]:
    obj: dict[str, Any] = {"id": fields["id"], "object": "batch", "endpoint": fields["endpoint"],
                           "errors": None, "input_file_id": fields["input_file_id"],
                           "completion_window": fields["completion_window"],
                           "status": fields["status"],
                           "output_file_id": fields.get("output_file_id") or None,
                           "error_file_id": fields.get("error_file_id") or None}
    obj.update({name: _int(fields, name) for name in _TIMESTAMPS})
    obj["request_counts"] = {"total": _int(fields, "total") or 0,
                             "completed": _int(fields, "completed") or 0,
                             "failed": _int(fields, "failed") or 0}
    if fields.get("errors"):
        obj["errors"] = {"object": "list", "data": orjson.loads(fields["errors"])}
    obj["metadata"] = orjson.loads(fields["metadata"]) if fields.get("metadata") else None
    prompt, completion = _int(fields, "input_tokens") or 0, _int(fields, "output_tokens") or 0
    obj["usage"] = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": prompt + completion}
    return obj


@dataclass(frozen=True, slots=True)
class LineRun:
    """One run of a batch line: its stable id (the same on every run) and the run's
    generation (``BatchStore.start_line``): of two runs, the later one's bill stands
    and only it may record the line's answer."""

    id: str
    generation: int


def line_id(batch_id: str, custom_id: str) -> str:
    """A stable id for one line of one batch: the same on every retry of it."""
    return "batch_req_" + hashlib.sha256(f"{batch_id}\0{custom_id}".encode()).hexdigest()[:32]


def result_line(batch_id: str, custom_id: str, status: int, body: dict[str, Any]) -> bytes:
    """A line of the output (2xx) or error file, in OpenAI's format."""
    rid = line_id(batch_id, custom_id)
    return orjson.dumps({"id": rid, "custom_id": custom_id,
                         "response": {"status_code": status, "request_id": rid, "body": body},
                         "error": None})


def unrun_line(batch_id: str, custom_id: str, code: str, message: str) -> bytes:
    """An error-file line for a request that never ran (batch expired or cancelled)."""
    return orjson.dumps({"id": line_id(batch_id, custom_id), "custom_id": custom_id,
                         "response": None, "error": {"code": code, "message": message}})
