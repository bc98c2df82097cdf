"""``/v1/files``: upload a batch input file, list, retrieve, download and delete.

    client.files.create(file=open("requests.jsonl", "rb"), purpose="batch")
    client.files.content(file_id).text

Uploads are read as a stream with a byte cap (413 past ``batch.max_file_bytes``),
spooled to disk, checked line by line (400 naming the first bad lines, or a
line longer than ``max_body_bytes``), then stored if the team's storage quota
has room (400 ``storage_quota_exceeded`` otherwise). ``expires_after`` is
OpenAI's, as the SDK sends it::

    client.files.create(file=f, purpose="batch",
                        expires_after={"anchor": "created_at", "seconds": 3600})

A team sees only its own files; any other id, or a deleted or expired file, is a 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from batch.jsonl import check_input
from batch.records import Owner, file_object
from core.errors import InvalidRequest, PayloadTooLarge
from gateway.batch_runner import batch_service
from gateway.deps import State, TeamCaller
from gateway.routes.json import json_response

router = APIRouter()
# Room for the multipart boundaries and the form fields around the file.
FORM_OVERHEAD = 64 * 1024
READ_CHUNK = 1024 * 1024
# OpenAI's bounds on expires_after[seconds] (and on a batch's output_expires_after).
MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 2_592_000


def owner_of(caller: Any) -> Owner:
    return Owner(caller.team.name, caller.key.hash)


async def _capped(stream: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise PayloadTooLarge(f"The file is larger than the {limit - FORM_OVERHEAD} byte limit.")
        yield chunk


def expires_after_s(anchor: Any, seconds: Any) -> int | None:
    """``expires_after[anchor]`` and ``expires_after[seconds]`` as seconds (None: not given)."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise InvalidRequest("expires_after[anchor] must be 'created_at'.",
                             param="expires_after[anchor]")
    text = seconds if isinstance(seconds, str) else ""
    if not text.isdigit() or not MIN_EXPIRY_S <= int(text) <= MAX_EXPIRY_S:
        raise InvalidRequest(f"expires_after[seconds] must be an integer from {MIN_EXPIRY_S} to "
                             f"{MAX_EXPIRY_S}, got {seconds!r}.", param="expires_after[seconds]")
    return int(text)


def declared_length(request: Request) -> int | None:
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


async def read_upload(request: Request, max_bytes: int) -> tuple[UploadFile, str, int | None]:
    """The uploaded file, its purpose and its expires_after, never reading more than the
    cap allows."""
    limit = max_bytes + FORM_OVERHEAD
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise PayloadTooLarge(f"The file is larger than the {max_bytes} byte limit.")
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidRequest("Upload the file as multipart/form-data.", param="file")
    parser = MultiPartParser(request.headers, _capped(request.stream(), limit), max_files=1,
                             max_fields=8)
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidRequest(f"Malformed multipart body: {exc.message}", param="file") from None
    upload, purpose = form.get("file"), form.get("purpose")
    if not isinstance(upload, UploadFile):
        raise InvalidRequest("Missing the 'file' part.", param="file")
    if purpose != "batch":
        raise InvalidRequest("Only purpose 'batch' is supported.", param="purpose")
    if (upload.size or 0) > max_bytes:
        raise PayloadTooLarge(f"The file is larger than the {max_bytes} byte limit.")
    lifetime = expires_after_s(form.get("expires_after[anchor]"),
                               form.get("expires_after[seconds]"))
    return upload, purpose, lifetime


@router.post("/v1/files")
async def create_file(request: Request, gw: State, caller: TeamCaller) -> Response:
    service, owner = batch_service(gw), owner_of(caller)
    service.refuse_if_unshared()
    settings = gw.config.batch
    declared = declared_length(request)
    if declared is not None and declared <= settings.max_file_bytes + FORM_OVERHEAD:
        # A file that surely cannot fit is refused before its body is read.
        await service.files.check_room(owner, max(0, declared - FORM_OVERHEAD))
    upload, purpose, lifetime = await read_upload(request, settings.max_file_bytes)
    try:
        report = await asyncio.to_thread(check_input, upload.file, max_lines=settings.max_lines,
                                         max_line_bytes=gw.config.max_body_bytes)
        if report.lines > settings.max_lines:
            raise InvalidRequest(f"The file has more than {settings.max_lines} requests.",
                                 param="file", code="too_many_requests")
        if report.lines == 0:
            raise InvalidRequest("The file holds no requests.", param="file", code="empty_file")
        if report.errors:
            raise InvalidRequest(f"{report.error_count} invalid line(s) in the file: "
                                 + "; ".join(report.errors), param="file", code="invalid_file")
        upload.file.seek(0)
        fields = await service.files.create(owner, upload.filename or "upload.jsonl", purpose,
                                            upload.file, lines=report.lines,
                                            expires_after_s=lifetime)
    finally:
        await upload.close()
    return json_response(file_object(fields))


@router.get("/v1/files")
async def list_files(gw: State, caller: TeamCaller, purpose: str | None = None,
                     limit: int = Query(10_000, ge=1, le=10_000),
                     order: Literal["asc", "desc"] = "desc", after: str | None = None) -> Response:
    listing = await batch_service(gw).files.list_page(owner_of(caller), purpose=purpose, limit=limit,
                                                 order=order, after=after)
    return json_response(listing)


@router.get("/v1/files/{file_id}")
async def retrieve_file(file_id: str, gw: State, caller: TeamCaller) -> Response:
    return json_response(await batch_service(gw).files.get(owner_of(caller), file_id))


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, gw: State, caller: TeamCaller) -> Response:
    files = batch_service(gw).files
    await files.fields(owner_of(caller), file_id)
    src = await asyncio.to_thread(files.blobs.open, file_id)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await asyncio.to_thread(src.read, READ_CHUNK):
                yield chunk
        finally:
            src.close()

    return StreamingResponse(chunks(), media_type="application/octet-stream")


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, gw: State, caller: TeamCaller) -> Response:
    return json_response(await batch_service(gw).files.delete(owner_of(caller), file_id))
