"""The Batch API's money and input safety (issue 20): storage quota, file expiry, files
deleted mid-batch, rate-limited teams, pools, line size, and test isolation.

Real gateways, the real simulator and the shared real Redis; the official SDK as client.
"""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import redis

from batch.blob_redis import RedisBlobStore
from batch.blobs import BlobMissing, DirectoryBlobStore
from tests.gateway.test_batch_api import batch_config, jsonl, lines_of, sdk, submit, wait
from tests.support import OTHER_KEY, Gateway, base_config, hashed, run_gateway

QUOTA = 200_000
LIVE_ONLY_KEY = "sk-live-only-team"


def storage_used(gw_config: dict[str, Any], team: str) -> int:
    """The team's stored bytes as the gateway counts them (read from the shared Redis)."""
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        prefix = gw_config["batch"]["key_prefix"]
        return int(client.hget(f"{prefix}:{{team:{team}}}:storage", "used") or 0)
    finally:
        client.close()


def listed_bytes(client: openai.OpenAI) -> int:
    return sum(f.bytes for f in client.files.list().data)


def has_blob(gw_config: dict[str, Any], file_id: str) -> bool:
    """Whether the file's bytes are in the gateway's blob store (redis here, unless local)."""
    if gw_config["batch"].get("blob_store") == "local":
        store: Any = DirectoryBlobStore(Path(gw_config["data_dir"]) / "files")
    else:
        store = RedisBlobStore(redis.Redis.from_url(gw_config["redis_url"]),
                               gw_config["batch"]["key_prefix"])
    try:
        return bool(store.read_range(file_id, 0, 1))
    except BlobMissing:
        return False


def stored_blobs(gw_config: dict[str, Any]) -> set[str]:
    """Every blob in the gateway's redis blob store (its manifests)."""
    client = redis.Redis.from_url(gw_config["redis_url"])
    try:
        return {k.decode() for k in client.scan_iter(
            match=f"{gw_config['batch']['key_prefix']}:{{blob:*}}", count=1000)}
    finally:
        client.close()


def eventually(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def missing(client: openai.OpenAI, file_id: str) -> bool:
    try:
        client.files.retrieve(file_id)
    except openai.NotFoundError:
        return True
    return False


def upload(client: openai.OpenAI, data: bytes, **kw: Any) -> Any:
    return client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch", **kw)


@pytest.fixture(scope="module")
def safety_config(sim_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    config = batch_config(sim_url, team_storage_bytes=QUOTA)
    config["teams"].append({"name": "live-only", "keys": [hashed(LIVE_ONLY_KEY)],
                            "allowed_pools": ["interactive"]})
    config["data_dir"] = str(tmp_path_factory.mktemp("safety") / "data")
    return config


@pytest.fixture(scope="module")
def safety_gateway(safety_config: dict[str, Any]) -> Iterator[Gateway]:
    with run_gateway(safety_config) as gw:
        yield gw


def test_concurrent_uploads_never_pass_the_team_quota(safety_gateway: Gateway,
                                                      safety_config: dict[str, Any]) -> None:
    client = sdk(safety_gateway, OTHER_KEY)
    files = [jsonl(300, prefix=f"u{k}_") for k in range(8)]
    size = len(files[0])
    assert {len(f) for f in files} == {size} and 4 * size <= QUOTA < 5 * size

    def try_upload(data: bytes) -> str:
        try:
            return upload(client, data).id
        except openai.BadRequestError as exc:
            assert exc.code == "storage_quota_exceeded", exc
            return "refused"

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(try_upload, files))
    stored = [o for o in outcomes if o != "refused"]
    assert len(stored) == 4
    assert storage_used(safety_config, "other") == listed_bytes(client) == 4 * size
    assert all(has_blob(safety_config, file_id) for file_id in stored)
    blobs_before = stored_blobs(safety_config)
    with pytest.raises(openai.BadRequestError) as err:  # refused before it is stored
        upload(client, jsonl(300, prefix="u9_"))
    assert stored_blobs(safety_config) == blobs_before
    assert err.value.status_code == 400 and err.value.code == "storage_quota_exceeded"
    assert "file storage" in err.value.message
    assert client.files.delete(stored[0]).deleted  # deleting frees quota at once
    assert not has_blob(safety_config, stored[0])
    assert storage_used(safety_config, "other") == 3 * size
    assert upload(client, jsonl(300, prefix="u9_")).bytes == size
    assert storage_used(safety_config, "other") == listed_bytes(client) == 4 * size


def test_expires_after_as_the_sdk_sends_it(safety_gateway: Gateway) -> None:
    client = sdk(safety_gateway)
    f = upload(client, jsonl(3), expires_after={"anchor": "created_at", "seconds": 3600})
    assert f.expires_at == f.created_at + 3600
    assert client.files.retrieve(f.id).expires_at == f.created_at + 3600
    default = upload(client, jsonl(3))
    assert default.expires_at == default.created_at + 30 * 86400
    for bad in ({"anchor": "created_at", "seconds": 60}, {"anchor": "created_at", "seconds": 2592001},
                {"anchor": "last_active_at", "seconds": 3600}):
        with pytest.raises(openai.BadRequestError) as err:
            upload(client, jsonl(3), expires_after=bad)  # type: ignore[arg-type]
        assert (err.value.param or "").startswith("expires_after")
    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                  completion_window="24h",
                                  output_expires_after={"anchor": "created_at", "seconds": 7200})
    batch = wait(client, batch.id)
    assert batch.status == "completed" and batch.output_file_id
    out = client.files.retrieve(batch.output_file_id)
    assert out.expires_at == out.created_at + 7200
    with pytest.raises(openai.BadRequestError):
        client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                              completion_window="24h",
                              output_expires_after={"anchor": "created_at", "seconds": 10})


def test_deleting_the_input_mid_batch_runs_every_line(safety_gateway: Gateway,
                                                      safety_config: dict[str, Any]) -> None:
    client = sdk(safety_gateway)
    batch = submit(client, jsonl(40, model="slowpoke", max_tokens=2))
    deadline = time.monotonic() + 30
    while client.batches.retrieve(batch.id).request_counts.completed < 4:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert client.files.delete(batch.input_file_id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(batch.input_file_id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(batch.input_file_id)
    assert batch.input_file_id not in [f.id for f in client.files.list().data]
    assert client.batches.retrieve(batch.id).status == "in_progress"
    assert has_blob(safety_config, batch.input_file_id)  # still read by the batch
    batch = wait(client, batch.id, timeout=60)
    assert batch.status == "completed"
    output, errors = lines_of(client, batch.output_file_id), lines_of(client, batch.error_file_id)
    assert Counter(line["custom_id"] for line in output + errors) == {f"r{i}": 1 for i in range(40)}
    assert batch.request_counts.completed == len(output) == 40  # type: ignore[union-attr]
    eventually(lambda: not has_blob(safety_config, batch.input_file_id))
    assert storage_used(safety_config, "test") == listed_bytes(client)


def test_a_team_not_allowed_the_batch_pool_cannot_create_batches(safety_gateway: Gateway) -> None:
    client = sdk(safety_gateway, LIVE_ONLY_KEY)
    f = upload(client, jsonl(2))
    with pytest.raises(openai.PermissionDeniedError) as err:
        client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
    assert err.value.status_code == 403 and err.value.code == "pool_not_allowed"
    assert client.batches.list().data == []


def test_a_line_longer_than_max_body_bytes_is_refused(safety_gateway: Gateway,
                                                      safety_config: dict[str, Any]) -> None:
    client = sdk(safety_gateway)
    cap = safety_config["max_body_bytes"]
    huge = orjson.dumps({"custom_id": "huge", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "fast", "messages": [
                             {"role": "user", "content": "x" * (cap + 10)}]}})
    with pytest.raises(openai.BadRequestError) as err:
        upload(client, jsonl(1) + huge + b"\n" + jsonl(1, prefix="s"))
    assert f"line 2: {len(huge)} bytes" in err.value.message
    assert str(cap) in err.value.message


def test_expired_files_are_swept_but_kept_for_a_running_batch(sim_url: str, tmp_path: Path
                                                               ) -> None:
    config = {**batch_config(sim_url, file_expiry_s=2), "data_dir": str(tmp_path / "data")}
    with run_gateway(config) as gw:
        client = sdk(gw)
        soon = upload(client, jsonl(5, prefix="a"))
        assert soon.expires_at == soon.created_at + 2
        later = upload(client, jsonl(5, prefix="b"),
                       expires_after={"anchor": "created_at", "seconds": 3600})
        running = upload(client, jsonl(40, model="slowpoke", max_tokens=2))
        batch = client.batches.create(input_file_id=running.id, endpoint="/v1/chat/completions",
                                      completion_window="24h",
                                      output_expires_after={"anchor": "created_at",
                                                            "seconds": 3600})
        eventually(lambda: not has_blob(config, soon.id))
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(soon.id)
        eventually(lambda: missing(client, running.id))  # expired too (created a moment later)
        assert client.batches.retrieve(batch.id).status == "in_progress"  # and still read
        assert has_blob(config, running.id)
        batch = wait(client, batch.id, timeout=60)
        assert batch.status == "completed" and batch.request_counts.completed == 40  # type: ignore[union-attr]
        eventually(lambda: not has_blob(config, running.id))
        assert [f.id for f in client.files.list().data] == [batch.output_file_id, later.id]
        assert storage_used(config, "test") == listed_bytes(client)


def test_a_rate_limited_team_gets_every_line_paced_not_failed(sim_url: str) -> None:
    """rpm 60, 70 lines, no line retries: the lines past the limit wait their retry-after."""
    config = batch_config(sim_url, line_retries=0)
    config["teams"][0]["budget"] = {"rpm": 60}
    with run_gateway(config) as gw:
        client = sdk(gw)
        batch = wait(client, submit(client, jsonl(70, max_tokens=2)).id, timeout=150)
        assert batch.status == "completed"
        assert batch.request_counts.model_dump() == {"total": 70, "completed": 70, "failed": 0}  # type: ignore[union-attr]
        assert len(lines_of(client, batch.output_file_id)) == 70
        assert '"status":429' in gw.log()  # the limit was really met, and waited out


def test_every_test_gateway_gets_its_own_batch_prefix() -> None:
    first, second = base_config("http://x/v1"), base_config("http://x/v1")
    assert first["batch"]["key_prefix"] != second["batch"]["key_prefix"]
    assert first["batch"]["key_prefix"] != "rgb"
