"""A Responses request (``POST /v1/responses``), typed: the door's schema and what it translates.

    request = read_request(body)        # ResponsesRequest, or InvalidRequest with OpenAI's param
    request.input[1]                    # e.g. FunctionCall(call_id="call_1", name="f", ...)

OpenAI's shapes (``shared/specs/openai-openapi.yaml``: ``CreateResponse``,
``InputItem``, ``FunctionTool``, ``ToolChoiceOptions``, ``TextResponseFormat*``)
for what this gateway serves. Items and parts of a kind it cannot serve
(hosted tools' calls, item references, files) are an ``UnknownItem`` or
``UnknownPart``, hosted tools a ``HostedTool``: the translation refuses them
by name. Parameters are in three groups, as OpenAI's own API has them: those
read here (the fields below), those accepted and ignored (``IGNORED``), and
those that need OpenAI's own state (``NEEDS_OPENAI``), refused when set; any
other is a 400 ``unknown_parameter``. A ``null`` field is an absent one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationError, model_validator

from gateway.protocols.openai_responses.invalid import invalid_request
from gateway.protocols.wire_model import (
    OTHER,
    STRING,
    TextOr,
    WireModel,
    by_type,
    refusal,
    type_tag,
)

IGNORED = frozenset({"include", "truncation", "reasoning", "service_tier", "prompt_cache_key",
                     "prompt_cache_retention", "prompt_cache_options", "safety_identifier",
                     "stream_options", "top_logprobs", "max_tool_calls", "context_management"})
NEEDS_OPENAI = ("conversation", "prompt", "background")
MAX_NAME = 128       # a tool's or a schema's name, as chat bounds it (openai_fields.py)
# OpenAI's own bounds on metadata (shared.metadata).
MAX_METADATA_KEYS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


class TextPart(WireModel):
    type: Literal["input_text", "output_text", "text"]
    text: str


class RefusalPart(WireModel):
    type: Literal["refusal"]
    refusal: str


class ImagePart(WireModel):
    type: Literal["input_image"]
    image_url: str | None = None        # a file_id alone needs OpenAI's file store: refused
    detail: str | None = None


class UnknownPart(WireModel):
    type: str


Part = Annotated[
    Annotated[TextPart, Tag("type=input_text")] | Annotated[TextPart, Tag("type=output_text")]
    | Annotated[TextPart, Tag("type=text")] | Annotated[RefusalPart, Tag("type=refusal")]
    | Annotated[ImagePart, Tag("type=input_image")] | Annotated[UnknownPart, Tag(OTHER)],
    by_type("input_text", "output_text", "text", "refusal", "input_image", other=True)]


class MessageItem(WireModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: TextOr[Part]


class FunctionCall(WireModel):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutput(WireModel):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: TextOr[Part]


class ReasoningItem(WireModel):
    """Another provider's reasoning, replayed by agent frameworks: no chat form, dropped."""

    type: Literal["reasoning"]


class UnknownItem(WireModel):
    type: str


Item = Annotated[
    Annotated[MessageItem, Tag("type=message")] | Annotated[FunctionCall, Tag("type=function_call")]
    | Annotated[FunctionCallOutput, Tag("type=function_call_output")]
    | Annotated[ReasoningItem, Tag("type=reasoning")] | Annotated[UnknownItem, Tag(OTHER)],
    by_type("message", "function_call", "function_call_output", "reasoning", other=True,
            absent="message")]


class FunctionTool(WireModel):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=MAX_NAME)
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class HostedTool(WireModel):
    """One of OpenAI's hosted tools (web search, code interpreter, ...): refused by name."""

    type: str


Tool = Annotated[Annotated[FunctionTool, Tag("type=function")] | Annotated[HostedTool, Tag(OTHER)],
                 by_type("function", other=True)]


class FunctionChoice(WireModel):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=MAX_NAME)


class AllowedToolsChoice(WireModel):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[FunctionChoice]


class HostedChoice(WireModel):
    type: str


_CHOICE_BY_TYPE = type_tag("function", "allowed_tools", other=True)


def _choice_kind(value: Any) -> str | None:
    """A word (auto, none, required) or an object by its type."""
    return STRING if isinstance(value, str) else _CHOICE_BY_TYPE(value)


ToolChoice = Annotated[
    Annotated[Literal["auto", "none", "required"], Tag(STRING)]
    | Annotated[FunctionChoice, Tag("type=function")]
    | Annotated[AllowedToolsChoice, Tag("type=allowed_tools")] | Annotated[HostedChoice, Tag(OTHER)],
    Discriminator(_choice_kind)]


class TextFormat(WireModel):
    type: Literal["text"]


class JsonObjectFormat(WireModel):
    type: Literal["json_object"]


class JsonSchemaFormat(WireModel):
    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=MAX_NAME)
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


Format = Annotated[
    Annotated[TextFormat, Tag("type=text")] | Annotated[JsonObjectFormat, Tag("type=json_object")]
    | Annotated[JsonSchemaFormat, Tag("type=json_schema")],
    by_type("text", "json_object", "json_schema")]


class TextConfig(WireModel):
    format: Format | None = None


Metadata = Annotated[dict[Annotated[str, Field(max_length=MAX_METADATA_KEY)],
                          Annotated[str, Field(max_length=MAX_METADATA_VALUE)]],
                     Field(max_length=MAX_METADATA_KEYS)]


class ResponsesRequest(WireModel):
    model: str
    input: TextOr[Item] | None = None
    instructions: TextOr[Item] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    metadata: Metadata | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_parameters(cls, body: Any) -> Any:
        """Every parameter is read, ignored or refused: an unknown one is a 400, as OpenAI's."""
        for key, value in body.items() if isinstance(body, dict) else ():
            if key in cls.model_fields or key in IGNORED:
                continue
            if key in NEEDS_OPENAI:
                if value is None or value is False or (key == "background" and not value):
                    continue
                raise refusal("unsupported_parameter", f"'{key}' is not supported by this gateway "
                              "(it needs OpenAI's own state); use previous_response_id or send "
                              "the input.", param=key)
            raise refusal("unknown_parameter", f"Unknown parameter: '{key}'.", param=key)
        return body


def read_request(body: dict[str, Any]) -> ResponsesRequest:
    """The body, typed; or a 400 naming the parameter as OpenAI does (``input[0].content``)."""
    try:
        return ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc) from None
