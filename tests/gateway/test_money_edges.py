"""Money round 3's edges, without a server: what is counted, forwarded and shown.

The end-to-end money tests (``test_money_oracle.py``) hold the bills against
the simulator's own count; these pin the pieces: the image rule, the output
cap that goes upstream, the shape bound checked before a body is parsed, and
what the Responses and Messages doors show.
"""

from __future__ import annotations

import asyncio
import base64
import io

import orjson
import pytest
from PIL import Image

from backends.sse import SSEEvent
from classifiers.images import ANTHROPIC, OPENAI_MAX, image_tokens
from classifiers.length import counter_for
from classifiers.prompt import structured_tokens, tools_text
from core.config import ModelConfig, ModelFacts, Price
from core.errors import InvalidRequest
from core.usage import Usage
from gateway.pipeline.dispatch import upstream_payload
from gateway.pipeline.request import check_shape, structural_objects
from gateway.protocols.anthropic_messages.parse import MessagesWire
from gateway.protocols.anthropic_messages.stream import MessagesStream
from gateway.protocols.chat_body import chat_request
from gateway.protocols.openai_responses.parse import ResponsesWire
from gateway.protocols.openai_responses.render import output_items


def png(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize(("size", "detail", "tokens"), [
    ((2048, 2048), "high", 765),       # fit 2048, shortest side 768: 2 x 2 tiles
    ((2048, 2048), "auto", 765),
    ((4096, 1024), "high", 765),       # 2048 x 512, then no upscale: 4 x 1 tiles
    ((512, 512), "high", 255),
    ((2048, 2048), "low", 85),
])
def test_images_cost_openais_tiles(size: tuple[int, int], detail: str, tokens: int) -> None:
    assert image_tokens(png(*size), detail) == tokens


def test_an_image_of_unknown_size_costs_the_rules_bound() -> None:
    assert image_tokens("https://example.com/cat.png") == OPENAI_MAX == 1445
    assert image_tokens("data:image/png;base64,bm90IGFuIGltYWdl") == OPENAI_MAX
    assert image_tokens(png(1000, 1000), rule=ANTHROPIC) == 1334        # 1,000,000 / 750


def test_tools_and_schemas_are_counted_where_the_model_reads_them() -> None:
    counter = counter_for("o200k_base")
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
            "parameters": {"type": "object", "required": ["city"],
                           "properties": {"city": {"type": "string", "description": "City."},
                                          "unit": {"enum": ["c", "f"]}}}}}
    text = tools_text([tool])
    assert "type get_weather = (_: {" in text and "city: string," in text
    assert 'unit?: "c" | "f",' in text
    assert structured_tokens({"tools": [tool]}, counter) == counter.count_text(text)
    schema = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
    assert structured_tokens({"response_format": schema}, counter) > 0
    assert structured_tokens({"response_format": {"type": "json_object"}}, counter) == 0
    assert structured_tokens({}, counter) == 0


def test_one_output_cap_goes_upstream_and_the_larger_is_reserved() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 5, "max_tokens": 1000}
    req = chat_request(dict(body), {})
    assert req.max_tokens == 1000                   # reserved and billed by the larger
    plain = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1))
    sent = upstream_payload(req, ModelFacts.of(plain), None)
    assert sent["max_completion_tokens"] == 5 and "max_tokens" not in sent
    reasoning = plain.model_copy(update={"output_tokens_param": "max_completion_tokens"})
    only_plain = chat_request({**body, "max_completion_tokens": None}, {})
    only_plain.body.pop("max_completion_tokens")
    sent = upstream_payload(only_plain, ModelFacts.of(reasoning), None)
    assert sent["max_completion_tokens"] == 1000 and "max_tokens" not in sent


def test_a_body_of_too_many_objects_is_refused_before_it_is_parsed() -> None:
    blocks = [{"type": "text", "text": "ab"}] * 200_000
    raw = orjson.dumps({"model": "m", "max_tokens": 5,
                        "messages": [{"role": "user", "content": blocks}]})
    assert structural_objects(raw) == 200_002
    with pytest.raises(InvalidRequest) as refused:
        check_shape(raw, 20_000)
    assert refused.value.code == "too_many_parts"
    # Braces in text are not objects: code in a prompt passes.
    code = orjson.dumps({"messages": [{"role": "user", "content": "{ } {x} {\"a\": 1}" * 9000}]})
    assert structural_objects(code) == 2
    check_shape(code, 20_000)


def test_an_answer_given_as_content_parts_is_rendered_as_their_text() -> None:
    wire = ResponsesWire(id="resp_x", created_at=0, echo={}, conversation=[])
    message = {"role": "assistant", "content": [{"type": "text", "text": "Hello "},
                                                {"type": "text", "text": "there"}]}
    (item,) = output_items(wire, message, "stop")
    assert item["content"][0]["text"] == "Hello there"


def test_message_start_carries_the_prompts_input_tokens() -> None:
    stream = MessagesStream(MessagesWire("fast"), "msg_1", prompt_tokens=42)
    first = stream.feed(SSEEvent.from_data({"model": "m", "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]}))
    start = orjson.loads(first[0].split(b"data: ", 1)[1])
    assert start["message"]["usage"]["input_tokens"] == 42
    end = asyncio.run(stream.finish(Usage(50, 3)))
    delta = orjson.loads(end[-2].split(b"data: ", 1)[1])
    assert delta["usage"]["input_tokens"] == 50 and delta["usage"]["output_tokens"] == 3


@pytest.mark.parametrize("part", [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
                                  {"type": "file", "file": {"file_id": "file-1"}},
                                  {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}}])
def test_parts_that_cannot_be_counted_are_a_400_naming_them(part: dict) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, part]}]}
    with pytest.raises(InvalidRequest) as refused:
        chat_request(body, {})
    assert refused.value.param == "messages[0].content[1].type"
    assert repr(part["type"]) in refused.value.message


@pytest.mark.parametrize(("wire", "param"), [
    ("gpt-5-mini", "max_completion_tokens"), ("o3", "max_completion_tokens"),
    ("openai/o4-mini", "max_completion_tokens"), ("gpt-4.1", None), ("omni-7b", None)])
def test_a_reasoning_model_is_sent_max_completion_tokens_from_any_door(wire: str, param: str | None
                                                                      ) -> None:
    """The Responses and Messages doors build chat bodies with max_tokens, which OpenAI's
    reasoning models refuse: for their ids it goes upstream as max_completion_tokens."""
    model = ModelConfig(name="m", backend="openai_compat", base_url="http://127.0.0.1:1/v1",
                        upstream_model=wire, price=Price(input_per_mtok=1, output_per_mtok=1))
    assert model.output_cap_param == param
    req = chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 64}, {})
    sent = upstream_payload(req, ModelFacts.of(model), None)
    assert sent[param or "max_tokens"] == 64 and len({"max_tokens", "max_completion_tokens"} & set(sent)) == 1
