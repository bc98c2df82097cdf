"""Agent frameworks that speak the Responses API, unchanged, against the gateway.

* the OpenAI Agents SDK (``openai-agents``): an agent with one ``@function_tool``
  runs to its final answer, through ``OpenAIResponsesModel`` on an
  ``AsyncOpenAI`` pointed at the gateway, tracing off (nothing is exported);
* pydantic-ai's default ``Agent("openai:…")``, which is its Responses model.

The simulator answers every request that offers tools with a call to the
first one, as a model keen on tools would. So the agent's tool is enabled
until it has been called once (the Agents SDK's ``is_enabled``): the second
turn, which carries the call and its output, offers none and gets the text
answer that ends the run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, OpenAIResponsesModel, RunContextWrapper, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic import BaseModel

from tests.support import TEST_KEY, Gateway


def agent_with_a_weather_tool(gateway: Gateway, calls: list[str]) -> Agent[Any]:
    def not_called_yet(ctx: RunContextWrapper[Any], agent: Any) -> bool:
        return not calls

    @function_tool(is_enabled=not_called_yet)
    def get_weather(city: str) -> str:
        """The weather in a city, right now."""
        calls.append(city)
        return f"Sunny and 21 C in {city}."

    client = AsyncOpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
    return Agent(name="forecaster", instructions="Answer with the weather tool.",
                 tools=[get_weather], model=OpenAIResponsesModel(model="fast", openai_client=client))


@pytest.fixture(autouse=True)
def no_tracing_export() -> None:
    set_tracing_disabled(True)


def test_an_agents_sdk_agent_runs_its_tool_to_a_final_answer(gateway: Gateway) -> None:
    calls: list[str] = []
    agent = agent_with_a_weather_tool(gateway, calls)
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=4))
    assert calls == ["value"]                 # the simulator fills the schema's string with "value"
    assert isinstance(result.final_output, str) and result.final_output
    assert len(result.raw_responses) == 2     # the call, then the answer after its output
    types = [item.type for item in result.new_items]
    assert types == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert all(r.usage.output_tokens > 0 for r in result.raw_responses)


def test_an_agents_sdk_agent_streams_its_run(gateway: Gateway) -> None:
    calls: list[str] = []
    agent = agent_with_a_weather_tool(gateway, calls)

    async def run() -> tuple[Any, list[str]]:
        streamed = Runner.run_streamed(agent, "Weather in Oslo?", max_turns=4)
        deltas = [event.data.delta async for event in streamed.stream_events()
                  if event.type == "raw_response_event"
                  and event.data.type == "response.output_text.delta"]
        return streamed, deltas

    streamed, deltas = asyncio.run(run())
    assert calls == ["value"]
    assert streamed.final_output == "".join(deltas) and deltas


class Forecast(BaseModel):
    city: str
    celsius: float


def test_pydantic_ais_default_openai_agent_answers(gateway: Gateway,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.openai import OpenAIResponsesModel as PydanticResponsesModel

    monkeypatch.setenv("OPENAI_BASE_URL", gateway.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    agent = PydanticAgent("openai:fast", instructions="Be brief.")
    assert isinstance(agent.model, PydanticResponsesModel)    # its default: the Responses API
    result = agent.run_sync("Say hello.")
    assert isinstance(result.output, str) and result.output
    assert result.usage.output_tokens > 0
    # Structured output is a tool call pydantic-ai validates against the model.
    forecast = PydanticAgent("openai:fast", output_type=Forecast).run_sync("Weather in Rome?")
    assert isinstance(forecast.output, Forecast)
