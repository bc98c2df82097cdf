"""The three blob stores behind one interface, each against a real server.

- ``redis``: the shared Redis on 127.0.0.1:6379 (a unique key prefix), and a
  real 3-master Redis Cluster started on free ports;
- ``s3``: moto's S3 server (``moto_server``), since no real S3 server
  installs here; boto3 speaks the same protocol to AWS, MinIO or R2;
- ``local``: a directory.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from batch.blob_redis import RedisBlobStore
from batch.blob_s3 import S3BlobStore
from batch.blobs import BlobMissing, DirectoryBlobStore, ReadThroughBlobStore
from tests.budget.servers import RedisClusterNodes
from tests.support import free_port, wait_http

SHARED_REDIS = "redis://127.0.0.1:6379/0"
CHUNK = 4096   # small, so that a few KiB cross several chunks


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/moto-api/", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def s3_store(moto_url: str) -> S3BlobStore:
    import boto3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    bucket = f"rg-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    return S3BlobStore(bucket, prefix="files/", endpoint_url=moto_url, region="us-east-1",
                       replica="r1")


@pytest.fixture(params=["local", "redis", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "local":
        yield DirectoryBlobStore(tmp_path / "files", replica="r1")
    elif request.param == "redis":
        prefix = f"rgbtest-{uuid.uuid4().hex[:10]}"
        client = redis.Redis.from_url(SHARED_REDIS)
        yield RedisBlobStore(client, prefix, chunk_bytes=CHUNK, replica="r1")
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()
    else:
        yield s3_store(request.getfixturevalue("moto_url"))


def payload(size: int) -> bytes:
    return bytes((i * 7 + i // 251) % 256 for i in range(size))


def exercise(store: Any) -> None:
    data = payload(3 * CHUNK + 123)
    assert store.put("file-a", io.BytesIO(data)) == len(data)
    assert store.put_bytes("file-b", b"one\ntwo\n") == 8
    with store.open("file-a") as f:
        assert f.read() == data
    with store.open("file-a") as f:   # read in small pieces, as scan_lines does
        pieces = []
        while piece := f.read(1000):
            pieces.append(piece)
        assert b"".join(pieces) == data
    for offset, length in ((0, 1), (CHUNK - 3, 10), (CHUNK, CHUNK), (100, 2 * CHUNK + 50),
                           (len(data) - 5, 100), (len(data), 10)):
        assert store.read_range("file-a", offset, length) == data[offset:offset + length]
    src = io.BytesIO(b"skip" + data)
    src.read(4)   # put copies from the current position
    assert store.put("file-c", src) == len(data)
    assert store.read_range("file-c", 0, len(data)) == data
    store.delete("file-a")
    store.delete("file-a")   # twice is fine
    for read in (lambda: store.open("file-a"), lambda: store.read_range("file-a", 0, 10)):
        with pytest.raises(BlobMissing) as err:
            read()
        assert "file-a" in str(err.value) and store.describe() in str(err.value)
        assert "replica r1" in str(err.value) and "deleted" not in str(err.value)
    assert store.read_range("file-b", 0, 100) == b"one\ntwo\n"
    with pytest.raises(ValueError):
        store.put_bytes("../etc/passwd", b"x")


def test_every_store_keeps_bytes_whole_and_names_itself_when_one_is_missing(store: Any) -> None:
    exercise(store)


def test_a_put_cut_off_half_way_is_never_seen_and_its_chunks_lapse() -> None:
    prefix = f"rgbtest-{uuid.uuid4().hex[:10]}"
    client = redis.Redis.from_url(SHARED_REDIS)
    store = RedisBlobStore(client, prefix, chunk_bytes=CHUNK)

    class Breaks(io.BytesIO):
        def read(self, n: int | None = -1) -> bytes:
            if self.tell() >= 2 * CHUNK:
                raise OSError("the upload's connection dropped")
            return super().read(n)

    try:
        with pytest.raises(OSError):
            store.put("file-x", Breaks(payload(5 * CHUNK)))
        with pytest.raises(BlobMissing):
            store.open("file-x")
        chunks = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        assert len(chunks) == 2 and all(0 < client.ttl(k) <= 3600 for k in chunks)
    finally:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()


def test_the_redis_store_on_a_real_cluster(tmp_path: Path) -> None:
    with RedisClusterNodes(tmp_path) as nodes:
        client = RedisCluster.from_url(nodes.url.replace("redis+cluster://", "redis://"))
        store = RedisBlobStore(client, "rgb", chunk_bytes=CHUNK, replica="r1")
        exercise(store)
        # Different blobs land on different nodes; one blob's keys share a slot.
        slots = {client.keyslot(f"rgb:{{blob:file-{i}}}") for i in range(20)}
        assert len(slots) > 1
        client.close()


def test_files_written_before_a_move_to_redis_stay_readable(tmp_path: Path) -> None:
    local = DirectoryBlobStore(tmp_path / "files", replica="r1")
    local.put_bytes("file-old", b"before the upgrade\n")
    client = redis.Redis.from_url(SHARED_REDIS)
    prefix = f"rgbtest-{uuid.uuid4().hex[:10]}"
    store = ReadThroughBlobStore(RedisBlobStore(client, prefix, replica="r1"), local)
    try:
        store.put_bytes("file-new", b"after\n")
        assert store.read_range("file-old", 0, 100) == b"before the upgrade\n"
        assert store.open("file-new").read() == b"after\n"
        assert not (tmp_path / "files" / "file-new").exists()   # new bytes go to Redis
        store.delete("file-old")
        with pytest.raises(BlobMissing):
            store.open("file-old")
    finally:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()
