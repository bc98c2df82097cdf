"""``POST /v1/embeddings``: vectors from a model declared ``kind: embedding``.

    req = parse_embedding(raw_body, headers)     # -> ModelRequest (operation EMBEDDING)

Routed by name or alias only, never classified (``gateway/pipeline/routing.py``
refuses ``auto`` and chat models here); budgeted and billed by its input
tokens at the model's input price, and filed in the ledger like any other
request. ``input`` is a string, token ids, or a list of either (at most
2,048); ``dimensions``, ``encoding_format`` and ``user`` go upstream as
they came, and so does the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from core.errors import InvalidRequest
from gateway.observe.tracing import TraceContext
from gateway.pipeline.request import EMBEDDING, ModelRequest, load_object, off_loop, positive_int
from gateway.protocols.openai_shape import OpenAIShape, prompts_of

if TYPE_CHECKING:
    from gateway.auth import Caller


def parse_embedding(raw: bytes, headers: Mapping[str, str]) -> ModelRequest:
    body = load_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is a required string", param="model",
                             code="missing_required_parameter")
    texts, ids = prompts_of(body.get("input"), "input")
    if any(t == "" for t in texts) and not ids:
        raise InvalidRequest("'input' cannot contain an empty string", param="input")
    if body.get("encoding_format") not in (None, "float", "base64"):
        raise InvalidRequest("'encoding_format' must be 'float' or 'base64'",
                             param="encoding_format")
    positive_int(body, "dimensions", 65536)
    if body.get("stream"):
        raise InvalidRequest("Embeddings are not streamed.", param="stream")
    return ModelRequest(
        body=body, model=model, messages=[{"role": "user", "content": t} for t in texts],
        stream=False, include_usage=False, max_tokens=None, choices=1, quality=None,
        has_tools=False, has_response_format=False, operation=EMBEDDING, templated=False,
        extra_prompt_tokens=ids, trace=TraceContext.from_headers(headers))


class EmbeddingsDoor(OpenAIShape):
    """Everything but parsing is chat's: OpenAI's shapes, passed through."""

    name = "embeddings"

    async def parse(self, raw: bytes, headers: Mapping[str, str], caller: Caller
                    ) -> ModelRequest:
        return await off_loop(raw, parse_embedding, raw, headers)


EMBEDDINGS_DOOR = EmbeddingsDoor()
