"""An Anthropic Messages request, typed: the door's schema and what its translation reads.

    request = read_request(body)            # MessagesRequest, or InvalidRequest naming the field
    counted = read_count_request(body)      # a count_tokens body: no max_tokens
    request.messages[0].content[1]                # e.g. ImageBlock(source=UrlImage(url=...))

Anthropic's own field rules (``POST /v1/messages``): ``model``, ``max_tokens``
and ``messages`` required; ``max_tokens`` at least 1, ``temperature`` and
``top_p`` within 0..1, ``top_k`` at least 0; content blocks by ``type``.
Blocks of a type this gateway does not read (server tools' blocks, search
results, ...) are an ``UnknownBlock``, tools other than custom ones a
``ServerTool``: the translation (``parse.py``) refuses them by name. A system
prompt is text blocks only. Unknown fields are let through, as Anthropic adds
them; the body stays as the client wrote it for an ``anthropic`` upstream.
A ``null`` optional field is as good as an absent one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, Tag, ValidationError

from gateway.protocols.anthropic_messages.invalid import invalid_request, shown
from gateway.protocols.wire_model import OTHER, TextOr, WireModel, by_type, refusal


class TextBlock(WireModel):
    type: Literal["text"]
    text: str


class Base64Image(WireModel):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class UrlImage(WireModel):
    type: Literal["url"]
    url: str


ImageSource = Annotated[Annotated[Base64Image, Tag("type=base64")]
                        | Annotated[UrlImage, Tag("type=url")], by_type("base64", "url")]


class ImageBlock(WireModel):
    type: Literal["image"]
    source: ImageSource


class UnknownBlock(WireModel):
    """A block of a type this gateway does not read: refused by name in the translation."""

    type: str


ResultPart = Annotated[Annotated[TextBlock, Tag("type=text")] | Annotated[ImageBlock, Tag("type=image")]
                       | Annotated[UnknownBlock, Tag(OTHER)], by_type("text", "image", other=True)]


class TextSource(WireModel):
    type: Literal["text"]
    data: str


class ContentSource(WireModel):
    type: Literal["content"]
    content: TextOr[ResultPart]


class OpaqueSource(WireModel):
    """A PDF, a URL or a file id: its cost cannot be counted before it is read (refused)."""

    type: str


DocumentSource = Annotated[Annotated[TextSource, Tag("type=text")]
                           | Annotated[ContentSource, Tag("type=content")]
                           | Annotated[OpaqueSource, Tag(OTHER)], by_type("text", "content", other=True)]


class DocumentBlock(WireModel):
    type: Literal["document"]
    source: DocumentSource
    title: str | None = None
    context: str | None = None


class ToolUseBlock(WireModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(WireModel):
    type: Literal["tool_result"]
    tool_use_id: str
    is_error: bool | None = None
    content: TextOr[ResultPart] | None = None


class ThinkingBlock(WireModel):
    """Dropped on the way to chat: only the type is read."""

    type: Literal["thinking"]
    thinking: str = ""
    signature: str | None = None


class RedactedThinkingBlock(WireModel):
    type: Literal["redacted_thinking"]
    data: str = ""


_KINDS = ("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking")
Block = Annotated[
    Annotated[TextBlock, Tag("type=text")] | Annotated[ImageBlock, Tag("type=image")]
    | Annotated[DocumentBlock, Tag("type=document")] | Annotated[ToolUseBlock, Tag("type=tool_use")]
    | Annotated[ToolResultBlock, Tag("type=tool_result")]
    | Annotated[ThinkingBlock, Tag("type=thinking")]
    | Annotated[RedactedThinkingBlock, Tag("type=redacted_thinking")]
    | Annotated[UnknownBlock, Tag(OTHER)], by_type(*_KINDS, other=True)]


def _text_only(value: Any) -> Any:
    """A system prompt's blocks are text: any other kind is refused here, by name."""
    kind = value.get("type") if isinstance(value, dict) else None
    if isinstance(kind, str) and kind != "text":
        raise refusal("invalid_value", f"content blocks of type {shown(kind)} are not supported "
                      "by this gateway (a system prompt is text).")
    return value       # anything else is TextBlock's to judge


SystemBlock = Annotated[TextBlock, BeforeValidator(_text_only)]


class Message(WireModel):
    role: Literal["user", "assistant"]
    content: TextOr[Block]


class CustomTool(WireModel):
    type: Literal["custom"] = "custom"
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")
    description: str | None = None
    input_schema: dict[str, Any]


class ServerTool(WireModel):
    """One of Anthropic's server tools (bash, web search, ...): refused by name."""

    type: str
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,128}$")


Tool = Annotated[Annotated[CustomTool, Tag("type=custom")] | Annotated[ServerTool, Tag(OTHER)],
                 by_type("custom", other=True, absent="custom")]


class ToolChoiceMode(WireModel):
    type: Literal["auto", "any", "none"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(WireModel):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool | None = None


ToolChoice = Annotated[
    Annotated[ToolChoiceMode, Tag("type=auto")] | Annotated[ToolChoiceMode, Tag("type=any")]
    | Annotated[ToolChoiceMode, Tag("type=none")] | Annotated[ToolChoiceTool, Tag("type=tool")],
    by_type("auto", "any", "none", "tool")]


class Metadata(WireModel):
    user_id: str | None = None


class MessagesBody(WireModel):
    """A Messages request's fields; as it is, a ``count_tokens`` body (no ``max_tokens``)."""

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    messages: list[Message] = Field(min_length=1)
    system: TextOr[SystemBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    metadata: Metadata | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: dict[str, Any] | None = None


class MessagesRequest(MessagesBody):
    """A ``POST /v1/messages`` body: ``max_tokens`` is required."""

    max_tokens: int = Field(ge=1)


def read_request(body: dict[str, Any]) -> MessagesRequest:
    """The body, typed; or a 400 naming the field, in the words this door always used."""
    try:
        return MessagesRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc) from None


def read_count_request(body: dict[str, Any]) -> MessagesBody:
    """A ``count_tokens`` body, typed (nothing is generated: no ``max_tokens``)."""
    try:
        return MessagesBody.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc) from None
