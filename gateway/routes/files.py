"""``/v1/files``: upload a batch input file, list, retrieve, download and delete.

    client.files.create(file=open("requests.jsonl", "rb"), purpose="batch")
    client.files.content(file_id).text

Uploads are read as a stream with a byte cap (413 past ``batch.max_file_bytes``),
spooled to disk, checked line by line (400 naming the first bad lines, or a
line longer than ``max_body_bytes``), then stored. A team sees only its own files; any other id is a 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from batch.jsonl import check_input
from batch.records import Owner
from core.errors import InvalidRequest, PayloadTooLarge
from gateway.batch_runner import batch_service
from gateway.deps import State, TeamCaller

router = APIRouter()
# Room for the multipart boundaries and the purpose field around the file.
FORM_OVERHEAD = 64 * 1024
READ_CHUNK = 1024 * 1024


def owner_of(caller: Any) -> Owner:
    return Owner(caller.team.name, caller.key.hash)


def json_response(obj: Any) -> Response:
    return Response(orjson.dumps(obj), media_type="application/json")


async def _capped(stream: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise PayloadTooLarge(f"The file is larger than the {limit - FORM_OVERHEAD} byte limit.")
        yield chunk


async def read_upload(request: Request, max_bytes: int) -> tuple[UploadFile, str]:
    """The uploaded file and its purpose, never reading more than the cap allows."""
    limit = max_bytes + FORM_OVERHEAD
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
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
    return upload, purpose


@router.post("/v1/files")
async def create_file(request: Request, gw: State, caller: TeamCaller) -> Response:
    service = batch_service(gw)
    settings = gw.config.batch
    upload, purpose = await read_upload(request, settings.max_file_bytes)
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
        fields = await service.files.create(owner_of(caller), upload.filename or "upload.jsonl",
                                            purpose, upload.file, lines=report.lines)
    finally:
        await upload.close()
    return json_response(await service.files.get(owner_of(caller), fields["id"]))


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
