"""The configured model's name in every answer's body, not the upstream's id.

A model configured as ``m`` whose upstream serves ``Org/Upstream-7B`` answers
``"model": "m"`` in the chat body, in every stream chunk and in a batch output
line; the rest of the body is the upstream's, byte for byte.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam

from backends.model_name import BodyModel
from backends.sse import SSEEvent
from core.config import ModelConfig
from tests.support import TEST_KEY, Gateway, hashed, run_gateway, run_simulator

WIRE = "Org/Upstream-7B"


def _model(wire: str = WIRE) -> ModelConfig:
    return ModelConfig.model_validate({
        "name": "m", "backend": "openai_compat", "base_url": "http://127.0.0.1:1/v1",
        "upstream_model": wire, "price": {"input_per_mtok": 1, "output_per_mtok": 1}})


def test_the_top_level_model_is_renamed_and_nothing_else() -> None:
    rename = BodyModel.of(_model())
    body = orjson.dumps({"id": "x", "model": WIRE, "choices": [{"message": {
        "content": '{"model":"Org/Upstream-7B"}'}}]})
    renamed, data = rename.completion(body, orjson.loads(body))
    assert data["model"] == "m"
    assert renamed == body.replace(b'"model":"Org/Upstream-7B","choices"', b'"model":"m","choices"')
    assert orjson.loads(renamed)["choices"][0]["message"]["content"] == '{"model":"Org/Upstream-7B"}'


def test_spaced_json_and_stream_chunks() -> None:
    rename = BodyModel.of(_model())
    spaced = b'{"id": "x", "model": "Org/Upstream-7B", "choices": []}'
    assert rename.completion(spaced, orjson.loads(spaced))[0] == spaced.replace(WIRE.encode(), b"m")
    event = rename.event(SSEEvent.parse(b'data: {"model":"Org/Upstream-7B","choices":[]}\n\n'))
    assert event.raw == b'data: {"model":"m","choices":[]}\n\n' and event.data == {
        "model": "m", "choices": []}
    # Azure names the deployment's underlying model, not the deployment: renamed too.
    other = SSEEvent.parse(b'data: {"model":"gpt-4o-2024-11-20","choices":[]}\n\n')
    assert rename.event(other).raw == b'data: {"model":"m","choices":[]}\n\n'


def test_an_answer_already_naming_the_model_is_untouched() -> None:
    body = b'{"model": "m", "choices": []}'
    data = orjson.loads(body)
    assert BodyModel.of(_model("m")).completion(body, data) == (body, data)


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with run_simulator("--tpot-ms", "1", "--output-mean", "6") as sim:
        model = {"name": "m", "backend": "openai_compat", "base_url": sim, "upstream_model": WIRE,
                 "price": {"input_per_mtok": 1, "output_per_mtok": 2}}
        config = {"models": [model], "teams": [{"name": "t", "keys": [hashed(TEST_KEY)]}],
                  "redis_url": "redis://127.0.0.1:6379/0",
                  "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
                  "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}",
                            "poll_interval_s": 0.05, "claim_interval_s": 0.5}}
        with run_gateway(config) as gateway:
            yield gateway


def test_chat_stream_and_batch_name_the_configured_model(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages,
                                                            max_tokens=8)
    assert raw.parse().model == "m" and raw.headers["x-routegate-model"] == "m"
    chunks = list(client.chat.completions.create(model="m", messages=messages, max_tokens=8,
                                                 stream=True))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert chunks and {c.model for c in chunks} == {"m"}
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "max_tokens": 8, "messages": messages}}
    upload = client.files.create(file=("in.jsonl", io.BytesIO(orjson.dumps(line) + b"\n")),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    deadline = time.monotonic() + 60
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert batch.output_file_id is not None
    out = orjson.loads(client.files.content(batch.output_file_id).content.splitlines()[0])
    assert out["response"]["body"]["model"] == "m"
