"""``/v1/batches``: create, retrieve, list and cancel batches of chat requests.

    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    client.batches.retrieve(batch.id).request_counts

Creating a batch enqueues one stream entry per line (``batch.queue``); the
workers of every replica run them. ``completion_window`` takes OpenAI's
``24h`` and, beyond OpenAI, any ``<n>s|m|h`` up to ``batch.max_completion_window_s``.
``output_expires_after`` (``{"anchor": "created_at", "seconds": 3600..2592000}``)
sets the lifetime of the output and error files. A team whose ``allowed_pools``
exclude ``batch`` is refused at once (403 ``pool_not_allowed``), as a live
request asking for that pool is.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from batch.jsonl import BATCH_URLS, first_url
from batch.submit import submit_batch
from core.errors import InvalidRequest, NotFound, PermissionDenied
from gateway.auth import Caller
from gateway.batch_runner import BatchService, batch_service
from gateway.deps import State, TeamCaller
from gateway.routes.files import MAX_EXPIRY_S, MIN_EXPIRY_S, owner_of
from gateway.routes.json import json_response

router = APIRouter()
_WINDOW = re.compile(r"^([1-9][0-9]{0,6})([smh])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


class OutputExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    anchor: Literal["created_at"]
    seconds: int = Field(ge=MIN_EXPIRY_S, le=MAX_EXPIRY_S)


class CreateBatch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    output_expires_after: OutputExpiresAfter | None = None


def check_batch_pool(caller: Caller) -> None:
    """A team not allowed the batch pool cannot run a batch's lines: say so now, not per line."""
    allowed = caller.team.allowed_pools
    if allowed is not None and "batch" not in allowed:
        raise PermissionDenied(f"Team {caller.team.name!r} may not use the batch pool, so it "
                               "cannot create batches.", code="pool_not_allowed")


async def check_endpoint(service: BatchService, file_id: str, endpoint: str) -> None:
    """The file's lines ask for the batch's endpoint (upload made them all ask for one)."""
    def read() -> str | None:
        with service.files.blobs.open(file_id) as f:
            return first_url(f)

    url = await asyncio.to_thread(read)
    if url != endpoint:
        raise InvalidRequest(f"The input file's requests are for {url}, not {endpoint}.",
                             param="endpoint")


def window_seconds(window: str, longest: int) -> int:
    match = _WINDOW.match(window)
    seconds = int(match[1]) * _UNIT_S[match[2]] if match else 0
    if not 0 < seconds <= longest:
        raise InvalidRequest(f"completion_window must be '24h' (or a duration like '90m' up to "
                             f"{longest} s), got {window!r}", param="completion_window")
    return seconds


@router.post("/v1/batches")
async def create_batch(spec: CreateBatch, gw: State, caller: TeamCaller) -> Response:
    service, owner = batch_service(gw), owner_of(caller)
    service.refuse_if_unshared()
    check_batch_pool(caller)
    if spec.endpoint not in BATCH_URLS:
        raise InvalidRequest(f"endpoint must be one of {', '.join(BATCH_URLS)}.",
                             param="endpoint")
    window_s = window_seconds(spec.completion_window, gw.config.batch.max_completion_window_s)
    try:
        input_file = await service.files.fields(owner, spec.input_file_id)
    except NotFound:
        raise NotFound(f"No such File object: {spec.input_file_id}",
                       param="input_file_id") from None
    if input_file["purpose"] != "batch":
        raise InvalidRequest("The input file must have purpose 'batch'.", param="input_file_id")
    await check_endpoint(service, spec.input_file_id, spec.endpoint)
    output_expires_s = spec.output_expires_after.seconds if spec.output_expires_after else None
    batch_id = await submit_batch(service.files, service.batches, service.queue, owner,
                                  input_file, window=spec.completion_window, window_s=window_s,
                                  metadata=spec.metadata, output_expires_s=output_expires_s)
    return json_response(await service.batches.get(owner, batch_id))


@router.get("/v1/batches")
async def list_batches(gw: State, caller: TeamCaller, after: str | None = None,
                       limit: int = Query(20, ge=1, le=100)) -> Response:
    return json_response(await batch_service(gw).batches.list_page(owner_of(caller), after=after,
                                                              limit=limit))


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(batch_id: str, gw: State, caller: TeamCaller) -> Response:
    return json_response(await batch_service(gw).batches.get(owner_of(caller), batch_id))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, gw: State, caller: TeamCaller) -> Response:
    batches = batch_service(gw).batches
    cancelled = await batches.cancel(owner_of(caller), batch_id, time.time())
    if cancelled is None:
        current = await batches.get(owner_of(caller), batch_id)
        if current["status"] in ("cancelling", "cancelled"):
            return json_response(current)
        raise InvalidRequest(f"A batch with status {current['status']!r} cannot be cancelled.",
                             param="batch_id", code="batch_not_cancellable")
    return json_response(cancelled)
