"""``POST /v1/messages/count_tokens``: a Messages request's prompt, as routegate counts it.

    count_input_tokens(body, "o200k_base")     # -> 42, or InvalidRequest

The count is the one routing, the reservation and billing's estimate read
(``gateway/pipeline/features.py``, ``count_prompt``): the request translated
as ``/v1/messages`` translates it, its messages, images, tool definitions and
schema counted with the model's tokenizer. So ``count_tokens`` and what a
request reserves never disagree. It is not the upstream's count (a model's
chat template adds its own tokens, and an upstream's report is what is
billed). Nothing is routed, reserved or billed; the body is read like a
Messages request, without ``max_tokens`` (``model.read_count_request``).
"""

from __future__ import annotations

from typing import Any

from classifiers.length import counter_for
from gateway.pipeline.features import count_prompt
from gateway.protocols.anthropic_messages.model import read_count_request
from gateway.protocols.anthropic_messages.parse import to_chat_body
from gateway.protocols.chat_body import chat_request


def count_input_tokens(body: dict[str, Any], encoding: str) -> int:
    req = chat_request(to_chat_body(read_count_request(body)), {})
    return count_prompt(req, counter_for(encoding))
