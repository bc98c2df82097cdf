"""Anthropic's Messages API (``POST /v1/messages``) as a door into the one pipeline.

    door.py     the Door: parse, render, translator, error
    model.py    the request, typed (pydantic): its schema and what parse.py reads
    invalid.py  a request that fails its types -> a 400 naming the field
    parse.py    the typed request -> an OpenAI chat body (pure)
    render.py   a chat.completion -> an Anthropic message (pure)
    stream.py   chat.completion.chunk events -> Anthropic's stream events (pure)
    errors.py   the gateway's error tree -> Anthropic's error types and statuses
    count.py    ``POST /v1/messages/count_tokens``: our own count of a request
    native.py   answers an ``anthropic`` upstream served natively, relayed as written
"""

from gateway.protocols.anthropic_messages.door import MESSAGES_DOOR, MessagesDoor

__all__ = ["MESSAGES_DOOR", "MessagesDoor"]
