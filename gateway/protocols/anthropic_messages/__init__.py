"""Anthropic's Messages API (``POST /v1/messages``) as a door into the one pipeline.

    door.py     the Door: parse, render, translator, error
    schema.py   the request's shape, checked (jsonschema)
    parse.py    the request -> an OpenAI chat body (pure)
    render.py   a chat.completion -> an Anthropic message (pure)
    stream.py   chat.completion.chunk events -> Anthropic's stream events (pure)
    errors.py   the gateway's error tree -> Anthropic's error types and statuses
    count.py    ``POST /v1/messages/count_tokens``: our own count of a request
"""

from gateway.protocols.anthropic_messages.door import MESSAGES_DOOR, MessagesDoor

__all__ = ["MESSAGES_DOOR", "MessagesDoor"]
