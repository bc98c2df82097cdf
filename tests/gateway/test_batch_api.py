"""The Batch API end to end: the official SDK against real gateways, simulator and Redis.

Two gateway replicas in separate working directories share only Redis, as on
two hosts: a file uploaded through one is read through the other, one is
killed with SIGKILL mid-batch and the other finishes the batch. With a local
blob store that they do not share, the replica that cannot read the other's
files refuses batch work instead of failing batches.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from budget.nanousd import cost_nanousd
from tests.support import (
    OTHER_KEY,
    REPO,
    TEST_KEY,
    Gateway,
    base_config,
    child_env,
    run_gateway,
    stop,
)

TERMINAL = {"completed", "failed", "expired", "cancelled"}
FAST_PRICE = (0.2 * 0.5, 0.4 * 0.5)  # base_config's "fast", at the batch pool's 0.5 multiplier


def batch_config(sim_url: str, **batch: Any) -> dict[str, Any]:
    settings = {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}", "poll_interval_s": 0.05,
                "sweep_interval_s": 0.2, "claim_interval_s": 0.5, "claim_idle_s": 2,
                "drain_grace_s": 5, "max_file_bytes": 128 * 1024, "max_lines": 500,
                "concurrency": 4, **batch}
    return base_config(sim_url, batch=settings)


def jsonl(n: int, model: str = "fast", max_tokens: int = 30, prefix: str = "r") -> bytes:
    return b"".join(orjson.dumps({
        "custom_id": f"{prefix}{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": model, "max_tokens": max_tokens,
                 "messages": [{"role": "user", "content": f"What is {i} + 1?"}]}}) + b"\n"
        for i in range(n))


def sdk(gw: Gateway, key: str = TEST_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=30)


def submit(client: openai.OpenAI, data: bytes, window: str = "24h") -> Any:
    upload = client.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")
    return client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                 completion_window=window)  # type: ignore[arg-type]


def wait(client: openai.OpenAI, batch_id: str, timeout: float = 60, until: set[str] = TERMINAL
         ) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in until:
            return batch
        assert time.monotonic() < deadline, f"batch stuck: {batch}"
        time.sleep(0.1)


def lines_of(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [orjson.loads(line) for line in client.files.content(file_id).content.splitlines()]


def spent_nanousd(gw: Gateway) -> int:
    reply = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"})
    return int(reply.json()["spent_today_nanousd"])


def billed(lines: list[dict[str, Any]]) -> int:
    usage = [line["response"]["body"]["usage"] for line in lines]
    return sum(cost_nanousd(u["prompt_tokens"], u["completion_tokens"], *FAST_PRICE) for u in usage)


@pytest.fixture(scope="module")
def batch_gateway(sim_url: str) -> Iterator[Gateway]:
    with run_gateway(batch_config(sim_url)) as gw:
        yield gw


def test_happy_path_with_the_sdk(batch_gateway: Gateway) -> None:
    client = sdk(batch_gateway)
    data = jsonl(60) + orjson.dumps({"custom_id": "nomodel", "method": "POST",
                                     "url": "/v1/chat/completions", "body": {"model": "nope",
                                     "messages": [{"role": "user", "content": "x"}]}}) + b"\n"
    batch = submit(client, data)
    assert batch.status in ("validating", "in_progress")
    batch = wait(client, batch.id)
    assert batch.status == "completed"
    assert batch.request_counts.model_dump() == {"total": 61, "completed": 60, "failed": 1}
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    output, errors = lines_of(client, batch.output_file_id), lines_of(client, batch.error_file_id)
    assert [line["custom_id"] for line in output] == [f"r{i}" for i in range(60)]
    assert all(line["response"]["body"]["object"] == "chat.completion" for line in output)
    assert errors[0]["custom_id"] == "nomodel"
    assert errors[0]["response"]["status_code"] == 404
    assert batch.usage is not None and batch.usage.output_tokens == sum(
        line["response"]["body"]["usage"]["completion_tokens"] for line in output)
    listed = client.batches.list(limit=100)
    assert batch.id in [b.id for b in listed.data]
    files = client.files.list()
    assert {batch.input_file_id, batch.output_file_id} <= {f.id for f in files.data}


def test_bad_uploads_are_refused_with_the_lines_named(batch_gateway: Gateway) -> None:
    client = sdk(batch_gateway)
    bad = jsonl(3) + b"{oops\n" + jsonl(1, prefix="r") + b'{"custom_id": "x", "method": "GET"}\n'
    with pytest.raises(openai.BadRequestError) as err:
        client.files.create(file=("bad.jsonl", io.BytesIO(bad)), purpose="batch")
    message = err.value.body["message"]  # type: ignore[index]
    assert "line 4: not valid JSON" in message
    assert "line 5: custom_id 'r0' is already used on line 1" in message
    assert "line 6: method" in message
    with pytest.raises(openai.APIStatusError) as big:
        client.files.create(file=("big.jsonl", io.BytesIO(b"x" * 200_000)), purpose="batch")
    assert big.value.status_code == 413
    with pytest.raises(openai.BadRequestError, match="more than 500"):
        client.files.create(file=("many.jsonl", io.BytesIO(jsonl(501, max_tokens=1))),
                            purpose="batch")
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("x.jsonl", io.BytesIO(jsonl(1))), purpose="fine-tune")


def test_another_team_gets_404_everywhere(batch_gateway: Gateway) -> None:
    mine, theirs = sdk(batch_gateway), sdk(batch_gateway, OTHER_KEY)
    batch = wait(mine, submit(mine, jsonl(5)).id)
    for call in (lambda: theirs.batches.retrieve(batch.id),
                 lambda: theirs.batches.cancel(batch.id),
                 lambda: theirs.files.retrieve(batch.input_file_id),
                 lambda: theirs.files.content(batch.input_file_id),
                 lambda: theirs.files.content(batch.output_file_id),
                 lambda: theirs.files.delete(batch.input_file_id),
                 lambda: theirs.batches.create(input_file_id=batch.input_file_id,
                                               endpoint="/v1/chat/completions",
                                               completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    assert batch.id not in [b.id for b in theirs.batches.list().data]
    assert theirs.files.list().data == [] or batch.input_file_id not in [
        f.id for f in theirs.files.list().data]
    assert mine.files.delete(batch.input_file_id).deleted
    with pytest.raises(openai.NotFoundError):
        mine.files.retrieve(batch.input_file_id)


def test_cancel_stops_promptly_and_keeps_what_completed(batch_gateway: Gateway) -> None:
    client = sdk(batch_gateway)
    batch = submit(client, jsonl(80, model="slowpoke", max_tokens=2))
    time.sleep(1.5)
    assert client.batches.cancel(batch.id).status == "cancelling"
    batch = wait(client, batch.id, timeout=30)
    assert batch.status == "cancelled" and batch.cancelling_at and batch.cancelled_at
    output, errors = lines_of(client, batch.output_file_id), lines_of(client, batch.error_file_id)
    assert 0 < len(output) < 40
    assert len(output) == batch.request_counts.completed
    assert {e["error"]["code"] for e in errors if e["error"]} == {"batch_cancelled"}
    assert Counter(line["custom_id"] for line in output + errors) == {f"r{i}": 1 for i in range(80)}


def test_expiry_follows_the_completion_window(batch_gateway: Gateway) -> None:
    client = sdk(batch_gateway)
    batch = submit(client, jsonl(60, model="slowpoke", max_tokens=2), window="2s")
    batch = wait(client, batch.id, timeout=30)
    assert batch.status == "expired" and batch.expired_at
    output, errors = lines_of(client, batch.output_file_id), lines_of(client, batch.error_file_id)
    assert 0 < len(output) < 60
    assert {e["error"]["code"] for e in errors if e["error"]} == {"batch_expired"}
    assert len(output) + len(errors) == 60


def test_hard_budget_fails_the_rest_with_insufficient_quota(sim_url: str) -> None:
    config = batch_config(sim_url)
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.0002}
    with run_gateway(config) as gw:
        client = sdk(gw)
        batch = wait(client, submit(client, jsonl(100)).id)
        assert batch.status == "completed"
        output, errors = lines_of(client, batch.output_file_id), lines_of(client, batch.error_file_id)
        assert output and errors and len(output) + len(errors) == 100
        codes = {e["response"]["body"]["error"]["code"] for e in errors}
        assert codes == {"insufficient_quota"}
        assert {e["response"]["status_code"] for e in errors} == {429}
        assert spent_nanousd(gw) == billed(output) <= 200_000


def test_two_hosts_sharing_only_redis_one_killed_mid_batch(sim_url: str) -> None:
    config = batch_config(sim_url)   # run_gateway gives each its own data_dir
    with run_gateway(config) as first, run_gateway(config) as second:
        assert first.config_path.parent != second.config_path.parent
        through_a, through_b = sdk(first), sdk(second)
        upload = through_a.files.create(file=("requests.jsonl", io.BytesIO(jsonl(200))),
                                        purpose="batch")
        assert through_b.files.content(upload.id).content == jsonl(200)  # read through B
        batch = through_b.batches.create(input_file_id=upload.id,
                                         endpoint="/v1/chat/completions",
                                         completion_window="24h")
        wait_for = time.monotonic() + 30
        while through_b.batches.retrieve(batch.id).request_counts.completed < 30:  # type: ignore[union-attr]
            assert time.monotonic() < wait_for
            time.sleep(0.02)
        first.proc.kill()  # SIGKILL: no shutdown, its lines stay pending in the stream
        first.proc.wait(5)
        batch = wait(through_b, batch.id, timeout=90)
        assert batch.status == "completed", batch
        output = lines_of(through_b, batch.output_file_id)
        errors = lines_of(through_b, batch.error_file_id)
        assert Counter(line["custom_id"] for line in output + errors) == {
            f"r{i}": 1 for i in range(200)}
        assert batch.request_counts.completed == len(output) == 200
        assert spent_nanousd(second) == billed(output)
        assert '"pool":"batch"' in first.log()  # the killed replica had taken lines too
        assert "took over" in second.log()  # and the survivor finished the ones it held
        theirs = sdk(second, OTHER_KEY)
        for call in (lambda: theirs.batches.retrieve(batch.id),
                     lambda: theirs.files.content(upload.id),
                     lambda: theirs.files.content(batch.output_file_id)):
            with pytest.raises(openai.NotFoundError):
                call()


def test_a_local_store_the_replicas_do_not_share_refuses_batch_work(sim_url: str) -> None:
    config = batch_config(sim_url, blob_store="local")
    with run_gateway(config) as first, run_gateway(config) as second:
        through_a, through_b = sdk(first), sdk(second)
        deadline = time.monotonic() + 15
        while True:   # each sees the other in the heartbeat and probes its store
            try:
                through_a.files.create(file=("r.jsonl", io.BytesIO(jsonl(3))), purpose="batch")
            except openai.APIStatusError as exc:
                refusal = exc
                break
            assert time.monotonic() < deadline, "replica A never noticed"
            time.sleep(0.2)
        assert refusal.status_code == 503 and refusal.code == "blob_store_not_shared"
        assert "batch.blob_store: redis" in refusal.message
        assert "cannot read the files that live replica" in first.log()
        with pytest.raises(openai.APIStatusError) as err:
            through_b.files.create(file=("r.jsonl", io.BytesIO(jsonl(3))), purpose="batch")
        assert err.value.status_code == 503
    # An upload that landed on A before the check is never "deleted" on B: B
    # answers that the bytes are not in its store, naming both.
    with run_gateway(config) as first:
        upload = sdk(first).files.create(file=("r.jsonl", io.BytesIO(jsonl(3))), purpose="batch")
        with run_gateway(config) as second:
            with pytest.raises(openai.APIStatusError) as err:
                sdk(second).files.content(upload.id)
            assert err.value.status_code == 503 and err.value.code == "file_bytes_unavailable"
            assert "the local blob store" in err.value.message and "replica" in err.value.message
            assert "deleted" not in err.value.message


def test_embedded_default_runs_a_batch(sim_url: str) -> None:
    """No redis_url: the embedded Redis under data_dir carries the Batch API too."""
    config = {**batch_config(sim_url), "redis_url": None}
    with run_gateway(config, env={"REDIS_URL": ""}) as gw:
        client = sdk(gw)
        batch = wait(client, submit(client, jsonl(20)).id)
        assert batch.status == "completed" and batch.request_counts.completed == 20  # type: ignore[union-attr]
        assert len(lines_of(client, batch.output_file_id)) == 20


def test_standalone_worker_runs_the_lines(sim_url: str) -> None:
    """``worker_in_serve: false``: only a ``routegate worker`` process runs lines."""
    with run_gateway(batch_config(sim_url, worker_in_serve=False)) as gw:
        client = sdk(gw)
        batch = submit(client, jsonl(20))
        time.sleep(1)
        assert client.batches.retrieve(batch.id).request_counts.completed == 0  # type: ignore[union-attr]
        worker = subprocess.Popen([sys.executable, "-m", "gateway.cli", "worker", "--config",
                                   str(gw.config_path)], env=child_env(), cwd=REPO,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            batch = wait(client, batch.id)
        finally:
            stop(worker)
        assert batch.status == "completed" and batch.request_counts.completed == 20  # type: ignore[union-attr]
        assert worker.returncode == 0  # SIGTERM is a clean stop
