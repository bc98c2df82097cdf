"""``/v1/responses`` through a real gateway and the real simulator, with the official SDK.

The ``echo`` model answers with the chat body it received, so a test can see
exactly what a Responses request became upstream.
"""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import jsonschema
import openai
import pytest
from openai.types.responses import EasyInputMessageParam, FunctionToolParam, ResponseInputItemParam
from pydantic import BaseModel

from tests.support import OTHER_KEY, Gateway

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "celsius": {"type": "number"}},
           "required": ["city", "celsius"], "additionalProperties": False}
# Room enough that the simulator's answer (a median of 20 tokens) ends on its own:
# one cut at the limit is a response.incomplete, which the SDK's stream helper refuses.
ROOM = 200
CITY = {"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"], "additionalProperties": False}
GET_WEATHER: FunctionToolParam = {"type": "function", "name": "get_weather",
                                  "description": "The weather in a city", "parameters": CITY,
                                  "strict": True}


def upstream_body(response: Any) -> dict[str, Any]:
    """What the echo model received: the chat body the gateway sent upstream."""
    return json.loads(response.output_text)


@pytest.fixture
def other(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=OTHER_KEY, max_retries=0, timeout=30)


def test_create_answers_in_the_responses_shape(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(
        model="fast", input="Say hello.", instructions="Be brief.", max_output_tokens=ROOM,
        metadata={"ticket": "t-1"})
    response = raw.parse()
    assert raw.headers["x-routegate-model"] == "fast"
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "completed" and response.output_text
    assert response.output[0].type == "message" and response.output[0].role == "assistant"
    assert response.metadata == {"ticket": "t-1"} and response.instructions == "Be brief."
    assert response.max_output_tokens == ROOM
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0 and 0 < usage.output_tokens <= ROOM
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0


def test_an_answer_cut_at_max_output_tokens_is_incomplete(client: openai.OpenAI) -> None:
    response = client.responses.create(model="fast", input="Tell me everything.", max_output_tokens=1)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 1


def test_instructions_and_items_reach_the_upstream_as_chat(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="echo", instructions="Answer in French.", max_output_tokens=30, temperature=0.5,
        input=[{"role": "developer", "content": "Be polite."},
               {"role": "user", "content": [{"type": "input_text", "text": "Bonjour?"}]}])
    sent = upstream_body(response)
    assert sent["messages"] == [{"role": "system", "content": "Answer in French."},
                                {"role": "system", "content": "Be polite."},
                                {"role": "user", "content": "Bonjour?"}]
    assert (sent["max_tokens"], sent["temperature"]) == (30, 0.5)


def test_stream_true_yields_openais_events_in_order(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="fast", input="Tell me a story.", stream=True,
                                          max_output_tokens=ROOM))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(types[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response                       # type: ignore[union-attr]
    assert text and final.output_text == text
    assert final.usage is not None and final.usage.output_tokens > 0


def test_the_stream_helper_accumulates_the_final_response(client: openai.OpenAI) -> None:
    with client.responses.stream(model="fast", input="Hello there.", max_output_tokens=ROOM) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "".join(deltas)


def test_json_schema_output_is_valid_json_of_that_schema(client: openai.OpenAI) -> None:
    response = client.responses.create(model="fast", input="Weather in Paris?", text={
        "format": {"type": "json_schema", "name": "weather", "schema": WEATHER, "strict": True}})
    jsonschema.validate(json.loads(response.output_text), WEATHER)
    assert response.text is not None and response.text.format is not None
    assert response.text.format.type == "json_schema"


class Weather(BaseModel):
    city: str
    celsius: float


def test_parse_with_a_pydantic_model(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(model="fast", input="Weather in Oslo?", text_format=Weather)
    assert isinstance(parsed.output_parsed, Weather)


def test_a_function_tool_over_two_turns(client: openai.OpenAI) -> None:
    question: EasyInputMessageParam = {"role": "user", "content": "What is the weather in Paris?"}
    first = client.responses.create(model="fast", input=[question], tools=[GET_WEATHER])
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].status == "completed"
    call = calls[0]
    assert call.call_id and call.id and call.id.startswith("fc_")
    jsonschema.validate(json.loads(call.arguments), CITY)
    # The client runs the tool and sends the call and its output back, as a tool loop does.
    # The output item's dump is its own input item, which the SDK's types cannot see.
    turn: list[ResponseInputItemParam] = [
        question, cast(ResponseInputItemParam, call.model_dump(exclude_none=True)),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}]
    final = client.responses.create(model="fast", input=turn, tools=[GET_WEATHER], tool_choice="none")
    assert final.output_text and not [i for i in final.output if i.type == "function_call"]
    # Left at "auto", the simulated fleet answers in text once the tool's result is in,
    # so an agent's loop ends on the demo fleet too.
    auto = client.responses.create(model="fast", input=turn, tools=[GET_WEATHER])
    assert auto.output_text and not [i for i in auto.output if i.type == "function_call"]
    # Upstream, that turn is the assistant's tool_calls and a tool message.
    sent = upstream_body(client.responses.create(model="echo", input=turn, tools=[GET_WEATHER],
                                                 tool_choice="none"))
    assert sent["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 21 C"}]
    assert sent["tool_choice"] == "none" and sent["tools"][0]["function"]["name"] == "get_weather"


def test_a_streamed_tool_call_has_its_argument_events(client: openai.OpenAI) -> None:
    with client.responses.stream(model="fast", input="Weather in Rome?", tools=[GET_WEATHER],
                                 tool_choice={"type": "function", "name": "get_weather"}) as stream:
        types = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in types
    assert types[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    (call,) = final.output
    assert call.type == "function_call"
    jsonschema.validate(json.loads(call.arguments), CITY)


def test_previous_response_id_continues_the_conversation(client: openai.OpenAI) -> None:
    first = client.responses.create(model="fast", input="My name is Ada.", instructions="Be brief.")
    second = client.responses.create(model="echo", previous_response_id=first.id,
                                     instructions="Be kind.", input="What is my name?")
    # The first turn's instructions are not carried over (as in OpenAI's API); its answer is.
    assert upstream_body(second)["messages"] == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "What is my name?"}]
    assert second.previous_response_id == first.id
    # A chain goes on: the third turn sees both before it.
    third = client.responses.create(model="echo", previous_response_id=second.id, input="Thanks.")
    assert [m["content"] for m in upstream_body(third)["messages"]] == [
        "My name is Ada.", first.output_text, "What is my name?", second.output_text, "Thanks."]


def test_a_streamed_response_can_be_chained_at_once(client: openai.OpenAI) -> None:
    with client.responses.stream(model="fast", input="Remember 42.") as stream:
        first = stream.get_final_response()
    second = client.responses.create(model="echo", previous_response_id=first.id, input="Which?")
    assert [m["content"] for m in upstream_body(second)["messages"]] == [
        "Remember 42.", first.output_text, "Which?"]


def test_retrieve_and_delete_a_stored_response(client: openai.OpenAI) -> None:
    created = client.responses.create(model="fast", input="Store me.")
    assert client.responses.retrieve(created.id).model_dump() == created.model_dump()
    raw = client.with_options().responses.with_raw_response.delete(created.id)
    assert raw.http_response.json() == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_store_false_is_not_stored(client: openai.OpenAI) -> None:
    created = client.responses.create(model="fast", input="Forget me.", store=False)
    assert created.model_extra and created.model_extra["store"] is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_another_teams_response_is_not_found(client: openai.OpenAI, other: openai.OpenAI) -> None:
    mine = client.responses.create(model="fast", input="Private.")
    expected = {"message": f"Response with id '{mine.id}' not found.",
                "type": "invalid_request_error", "param": None, "code": "not_found"}
    for call in (other.responses.retrieve, other.responses.delete):
        with pytest.raises(openai.NotFoundError) as caught:
            call(mine.id)
        assert caught.value.body == expected
    with pytest.raises(openai.NotFoundError) as caught:
        other.responses.create(model="fast", previous_response_id=mine.id, input="Steal it.")
    assert caught.value.body == {
        "message": f"Previous response with id '{mine.id}' not found.",
        "type": "invalid_request_error", "param": "previous_response_id",
        "code": "previous_response_not_found"}
    assert client.responses.retrieve(mine.id).id == mine.id          # still there for its team


def test_hosted_tools_are_refused_naming_the_tool(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="fast", input="Search the web.",
                                tools=[GET_WEATHER, {"type": "web_search_preview"}])
    assert caught.value.body["param"] == "tools[1].type"             # type: ignore[index]
    assert "'web_search_preview'" in caught.value.body["message"]    # type: ignore[index]


def test_a_key_is_checked_before_any_body(gateway: Gateway) -> None:
    for method, path in (("POST", "/v1/responses"), ("GET", "/v1/responses/resp_1"),
                         ("DELETE", "/v1/responses/resp_1")):
        r = httpx.request(method, gateway.url + path, headers={"authorization": "Bearer nope"},
                          timeout=10)
        assert r.status_code == 401, (method, path)
        assert r.json()["error"]["type"] == "authentication_error"


def test_a_stream_broken_midway_raises_in_the_sdk(client: openai.OpenAI) -> None:
    received = 0
    for _ in range(5):          # the simulator drops at a random token: find a drop after one
        received = 0
        with pytest.raises(openai.APIError, match="broke off the stream"):
            for event in client.responses.create(model="drops", input="Talk a while.", stream=True,
                                                 max_output_tokens=40):
                received += event.type == "response.output_text.delta"
        if received:
            break
    assert received, "the simulator never dropped after the first token"
    with pytest.raises(openai.APIError, match="broke off the stream"):
        for _ in range(5):
            with client.responses.stream(model="drops", input="Talk.", max_output_tokens=40) as s:
                s.get_final_response()
