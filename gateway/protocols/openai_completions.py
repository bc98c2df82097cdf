"""``POST /v1/completions``: OpenAI's legacy text completions, routed like chat by the prompt.

    req = parse_completion(raw_body, headers)    # -> ModelRequest (operation COMPLETION)

The body goes upstream as it came (but for the model id and, on streams, the
usage the gateway always asks for), to the model's ``/v1/completions``; the
answer and its ``text_completion`` chunks come back untouched. ``prompt``
is a string, token ids, or a list of either; every prompt is classified and
counted, and each asks for ``n`` answers (``best_of`` are generated and
billed), so the request's ceiling is ``prompts × best_of`` answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from core.errors import InvalidRequest
from gateway.observe.tracing import TraceContext
from gateway.pipeline.request import (
    COMPLETION,
    MAX_CHOICES,
    ModelRequest,
    load_object,
    model_and_quality,
    off_loop,
    positive_int,
    typed,
)
from gateway.protocols.openai_shape import OpenAIShape, prompts_of

if TYPE_CHECKING:
    from gateway.auth import Caller

def parse_completion(raw: bytes, headers: Mapping[str, str]) -> ModelRequest:
    body = load_object(raw)
    model, quality = model_and_quality(body, headers)
    texts, ids = prompts_of(body.get("prompt"), "prompt")
    stream = typed(body, "stream", bool, "a boolean") or False
    options = typed(body, "stream_options", dict, "an object") or {}
    n = positive_int(body, "n", MAX_CHOICES) or 1
    best_of = positive_int(body, "best_of", 20) or n
    if best_of < n:
        raise InvalidRequest("best_of must be at least n", param="best_of")
    if stream and best_of > n:
        raise InvalidRequest("best_of cannot be more than n when streaming", param="best_of")
    return ModelRequest(
        body=body, model=model, messages=[{"role": "user", "content": t} for t in texts],
        stream=stream, include_usage=bool(options.get("include_usage")),
        max_tokens=positive_int(body, "max_tokens"), choices=best_of * len(texts),
        quality=quality, has_tools=False, has_response_format=False, operation=COMPLETION,
        templated=False, extra_prompt_tokens=ids, trace=TraceContext.from_headers(headers))


class CompletionsDoor(OpenAIShape):
    """Everything but parsing is chat's: OpenAI's shapes, passed through."""

    name = "completions"

    async def parse(self, raw: bytes, headers: Mapping[str, str], caller: Caller
                    ) -> ModelRequest:
        return await off_loop(raw, parse_completion, raw, headers)


COMPLETIONS_DOOR = CompletionsDoor()
