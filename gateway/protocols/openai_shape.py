"""What the OpenAI-shaped doors share: answers passed through, OpenAI's errors, legacy inputs.

    class ChatDoor(OpenAIShape): ...          # parse is the door's own; the rest is here
    texts, ids = prompts_of(body["prompt"], "prompt")    # completions' prompt, embeddings' input

The upstream's answer and stream go back byte for byte, unless the usage
had to be corrected: the client sees what it is billed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.errors import GatewayError, InvalidRequest
from core.usage import Usage
from gateway.money.ceiling import with_usage
from gateway.protocols.base import StreamTranslator

if TYPE_CHECKING:
    from backends.base import Completion
    from gateway.pipeline.request import ModelRequest

MAX_PROMPTS = 2048


class OpenAIShape:
    """A door whose answers are OpenAI's own: render, translator and error."""

    async def render(self, req: ModelRequest, completion: Completion, usage: Usage,
                     corrected: bool) -> bytes:
        # The client sees what it is billed, never an upstream's refused figures.
        return with_usage(completion.data, usage) if corrected else completion.body

    def translator(self, req: ModelRequest, prompt_tokens: int = 0) -> StreamTranslator | None:
        return None

    def error(self, exc: GatewayError) -> tuple[int, bytes]:
        return exc.status_code, exc.to_json()


def prompts_of(value: Any, param: str) -> tuple[list[str], int]:
    """(the texts, the count of prompt tokens given as ids) of a prompt or input field."""
    if isinstance(value, str):
        return [value], 0
    if isinstance(value, list) and value and all(_is_id(t) for t in value):
        return [""], len(value)
    if not isinstance(value, list) or not value:
        raise InvalidRequest(f"'{param}' must be a string, an array of strings, or token ids",
                             param=param, code="missing_required_parameter" if value is None
                             else "invalid_value")
    if len(value) > MAX_PROMPTS:
        raise InvalidRequest(f"'{param}' holds at most {MAX_PROMPTS} items", param=param)
    texts, ids = [], 0
    for i, item in enumerate(value):
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, list) and item and all(_is_id(t) for t in item):
            texts.append("")
            ids += len(item)
        else:
            raise InvalidRequest(f"'{param}[{i}]' must be a string or token ids",
                                 param=f"{param}[{i}]")
    return texts, ids


def _is_id(token: Any) -> bool:
    return isinstance(token, int) and not isinstance(token, bool) and 0 <= token < 2**31
