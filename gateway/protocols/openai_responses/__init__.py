"""OpenAI's Responses API (``/v1/responses``) as a door into the chat pipeline.

    door.py     the Door: parse, render, translator, error
    model.py    the request, typed (pydantic): its schema and what the translation reads
    invalid.py  a request that fails its types -> a 400 with OpenAI's param and words
    parse.py    the typed request -> the chat body (items.py: input items, tools.py: tools, formats)
    render.py   a chat answer -> the response object
    stream.py   chat chunks -> Responses stream events
    store.py    stored responses in Redis (previous_response_id, GET and DELETE)
"""

from gateway.protocols.openai_responses.door import ResponsesDoor, not_found
from gateway.protocols.openai_responses.store import ResponseStore

RESPONSES_PATH = "/v1/responses"

__all__ = ["RESPONSES_PATH", "ResponseStore", "ResponsesDoor", "not_found"]
