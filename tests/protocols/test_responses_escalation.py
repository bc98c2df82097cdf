"""Structured output on ``/v1/responses`` is checked and escalated as on chat.

``text.format`` becomes the chat body's ``response_format`` and function
tools its ``tools``, so the pipeline's answer checks judge them as they judge
a chat request: an invalid answer climbs the ladder, and the client only sees
the valid one, in the Responses shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest
from openai.types.responses import FunctionToolParam, ResponseTextConfigParam

from tests.support import TEST_KEY, base_config, run_gateway

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}
FORMAT: ResponseTextConfigParam = {
    "format": {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}}
# No "strict": the gateway takes a tool without it, though the SDK's type requires the key.
TOOL: FunctionToolParam = {"type": "function", "name": "weather",  # type: ignore[typeddict-item]
                           "parameters": SCHEMA}


def sim_model(name: str, ability: float, price: float, **simulate: object) -> dict:
    return {"name": name, "backend": "simulated", "ability": ability,
            "price": {"input_per_mtok": price, "output_per_mtok": 2 * price},
            "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000, "seed": 7,
                         "output_tokens_mean": 12, **simulate}}


@pytest.fixture(scope="module")
def cascade(sim_url: str) -> Iterator[openai.OpenAI]:
    config = base_config(sim_url, routing={"auto_policy": "cheapest"})
    config["models"] += [sim_model("small", 0.5, 0.1, invalid_json_rate=1.0,
                                   invalid_tool_args_rate=1.0),
                         sim_model("medium", 0.7, 1.0), sim_model("large", 0.9, 5.0)]
    config["teams"][0]["allowed_models"] = ["small", "medium", "large"]
    with run_gateway(config) as gw:
        yield openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)


def test_invalid_json_climbs_the_ladder_and_the_client_gets_valid_json(
        cascade: openai.OpenAI) -> None:
    raw = cascade.responses.with_raw_response.create(model="auto", input="Oslo weather?", text=FORMAT)
    assert raw.headers["x-routegate-attempts"].startswith("small:")
    assert raw.headers["x-routegate-model"] != "small"
    jsonschema.validate(json.loads(raw.parse().output_text), SCHEMA)


def test_a_held_stream_climbs_too(cascade: openai.OpenAI) -> None:
    with cascade.responses.with_streaming_response.create(
            model="auto", input="Oslo weather?", text=FORMAT, stream=True) as raw:
        assert raw.headers["x-routegate-attempts"].startswith("small:")
        events = list(raw.parse())
    final = events[-1].response                                   # type: ignore[union-attr]
    assert events[-1].type == "response.completed"
    jsonschema.validate(json.loads(final.output_text), SCHEMA)


def test_invalid_tool_arguments_climb_the_ladder(cascade: openai.OpenAI) -> None:
    raw = cascade.responses.with_raw_response.create(model="auto", input="Oslo weather?",
                                                     tools=[TOOL], tool_choice="required")
    assert raw.headers["x-routegate-attempts"].startswith("small:")
    (call,) = raw.parse().output
    assert call.type == "function_call"
    jsonschema.validate(json.loads(call.arguments), SCHEMA)
