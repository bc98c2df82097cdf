"""``POST /v1/messages/count_tokens``: a Messages request's prompt, as routegate counts it.

    count_input_tokens(body, "o200k_base")     # -> 42, or InvalidRequest

The count is the gateway's own (``classifiers.length``, the tokenizer the
model is configured with): the translated chat messages, counted exactly as
routing and budgets count a prompt, plus the tool definitions' JSON, which a
client sizing its context must leave room for. It is not the upstream's
count (a model's chat template adds its own tokens), and it is free: nothing
is routed, reserved or billed. The body is checked like a Messages request,
without ``max_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from classifiers.length import counter_for
from gateway.protocols.anthropic_messages.parse import chat_messages, tool_fields
from gateway.protocols.anthropic_messages.schema import check_request


def count_input_tokens(body: Mapping[str, Any], encoding: str) -> int:
    check_request(body, counting=True)
    counter = counter_for(encoding)
    total = counter.count_messages(chat_messages(body))
    tools = tool_fields(body).get("tools")
    if tools:
        total += counter.count_text(orjson.dumps(tools).decode())
    return total
