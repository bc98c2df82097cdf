"""A stream cut short is billed for the tokens it relayed, counted with the model's tokenizer.

An upstream that sends several tokens a chunk (vLLM under load, hosted
providers) must not be billed one token a chunk. The relay keeps what each
chunk generated, and settling counts it; a lease renewal counts it as it
grows (``tokens_so_far``). No server: the relay reads an in-memory upstream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from backends.sse import SSEEvent
from classifiers.length import counter_for
from core.config import GatewayConfig, ModelConfig, ModelFacts, Price
from core.usage import Usage
from gateway.money.ceiling import Demand, Tariff
from gateway.money.settle import Bill
from gateway.pipeline.relay import StreamRelay

CONFIG = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=2))
MODEL = ModelFacts.of(CONFIG)
PIECES = ["The quick brown fox ", "jumps over the lazy dog, ", "and then it runs ",
          "far away into the forest."]


class Upstream:
    """An upstream stream of chat chunks, each carrying several tokens."""

    buffered = False
    usage: Usage | None = None
    prompt_seen: Usage | None = None
    ttft_s = 0.0
    tpot_s = None

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        for piece in PIECES:
            yield SSEEvent.from_data({"choices": [{"index": 0, "delta": {"content": piece}}]})

    async def aclose(self) -> None:
        return None


TARIFF = Tariff(GatewayConfig(models=[CONFIG]))
DEMAND = Demand({"o200k_base": 12}, 1, 100)


def test_a_client_leaving_mid_stream_is_billed_the_tokens_relayed_not_the_chunks() -> None:
    async def run() -> StreamRelay:
        relay = StreamRelay(Upstream(), include_usage=False, max_events=100,
                            ceiling=TARIFF.ceiling(MODEL, DEMAND, 1.0), ours=12)
        events = relay.events()
        for _ in range(2):                  # the client reads two chunks, then leaves
            await anext(events)
        await events.aclose()               # type: ignore[attr-defined]
        return relay
    relay = asyncio.run(run())
    tokens = counter_for("o200k_base").count_text("".join(PIECES[:2]))
    assert relay.chunks == 2 and tokens > 2 * relay.chunks
    assert relay.tokens_so_far() == tokens
    bill = Bill(TARIFF, demand=DEMAND, served=True, relayed_chunks=relay.chunks,
                relayed_text=relay.text)
    billed = bill.served_answer(MODEL)
    assert billed.usage == Usage(12, tokens, estimated=True)
    assert billed.cost == 12 * 1000 + tokens * 2000      # nano-USD at $1 and $2 per million
