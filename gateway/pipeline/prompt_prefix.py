"""A chat prompt read for prefix caching: the hashes a warm prefix is found by, its head,
and whether it marks the breakpoints some upstreams cache at (``warm.py`` keeps the record).

    chain = prefix_chain(req.body)          # one hash per message, each over all before it
    k = head_length(req.body["messages"])   # its leading system messages, when more follows
    has_breakpoints(body)                   # cache_control anywhere Anthropic or LiteLLM put it
    marks_an_hour(body)                     # one of them with ttl "1h"
    kept_at_breakpoints(body, k)            # what a breakpoint cache keeps: (whole, head)

Each request's prompt is hashed as a chain over its messages (the tools and
response format first, each message's hash taken over the one before it), so a
turn that appends to an earlier prompt contains that prompt's hash in its own
chain, and sessions that start alike share their first hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import orjson


def prefix_chain(body: dict[str, Any]) -> list[bytes]:
    """One hash per message of a chat body: each over the message and the hash before it,
    the first over the tools and the response format, which the model reads first.
    Prompt-cache breakpoints (``cache_control``, which clients move to the newest
    message each turn) are not part of what the model reads, so not of the hash; nor is
    a lone text part's wrapping (``[{"type": "text", "text": t}]`` is ``t``)."""
    head = {k: body[k] for k in ("tools", "response_format") if body.get(k)}
    if head.get("tools") and isinstance(head["tools"], list):
        head["tools"] = [_unmarked(t) for t in head["tools"]]
    parent = hashlib.blake2b(orjson.dumps(head, option=orjson.OPT_SORT_KEYS),
                             digest_size=16).digest()
    chain = []
    for message in body.get("messages") or ():
        data = orjson.dumps(_read_as(message), option=orjson.OPT_SORT_KEYS) \
            if isinstance(message, dict) else b""
        parent = hashlib.blake2b(parent + data, digest_size=16).digest()
        chain.append(parent)
    return chain


def head_length(messages: Any) -> int:
    """How many leading system (or developer) messages a chat prompt has, when something
    follows them (0 otherwise): its head, which the sessions of one agent share."""
    if not isinstance(messages, list):
        return 0
    k = 0
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            break
        k += 1
    return k if k < len(messages) else 0


def has_breakpoints(body: dict[str, Any]) -> bool:
    """Whether a request marks prompt-cache breakpoints (``cache_control``: Anthropic's
    body, top level or on a system block, tool, message or content part; the chat door's
    parts and tools, LiteLLM's form): an upstream that caches only at breakpoints
    (Anthropic, Bedrock) reads this request's prefix from its cache only then."""
    return next(_marks(body), None) is not None


def marks_an_hour(body: dict[str, Any]) -> bool:
    """Whether a breakpoint asks Anthropic to keep its prefix an hour (``ttl: "1h"``),
    whose writes cost twice the input price, not 1.25 times."""
    return any(isinstance(mark, dict) and mark.get("ttl") == "1h" for mark in _marks(body))


def _marks(body: dict[str, Any]) -> Iterator[Any]:
    """Every ``cache_control`` value where ``has_breakpoints`` looks, in order."""
    if "cache_control" in body:
        yield body["cache_control"]
    for key in ("system", "tools", "messages"):
        items = body.get(key)
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict):
                if "cache_control" in item:
                    yield item["cache_control"]
                content = item.get("content")
                for part in content if isinstance(content, list) else ():
                    if isinstance(part, dict) and "cache_control" in part:
                        yield part["cache_control"]


def kept_at_breakpoints(body: dict[str, Any], k: int) -> tuple[bool, bool]:
    """What an upstream that caches only at breakpoints keeps of this prompt once it has
    served it: (the whole prompt: a breakpoint on its last message, or at the top level,
    Anthropic's automatic placement at the end; its head: a breakpoint at the head's end,
    on its last system block, or on the last of its first ``k`` messages). A breakpoint
    anywhere else (the tools alone, an earlier block) keeps a prefix this record does not
    name: neither is counted on."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    end = "cache_control" in body or (bool(messages) and _ends_marked(messages[-1]))
    if k:
        head = 0 < k <= len(messages) and _ends_marked(messages[k - 1])
    else:                                 # the door's own body: the system is apart
        system = body.get("system")
        head = isinstance(system, list) and bool(system) and _ends_marked(system[-1])
    return end, head


def _ends_marked(item: Any) -> bool:
    """Whether a message (or a system block) carries a breakpoint at its end: on itself,
    or on its last content part."""
    if not isinstance(item, dict):
        return False
    if "cache_control" in item:
        return True
    content = item.get("content")
    return (isinstance(content, list) and bool(content) and isinstance(content[-1], dict)
            and "cache_control" in content[-1])


def _read_as(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as the model reads it: without breakpoints, a lone text part as text."""
    content = message.get("content")
    if "cache_control" not in message and not isinstance(content, list):
        return message                    # the common case: nothing to take off
    out = {k: v for k, v in message.items() if k != "cache_control"}   # never the body's
    if isinstance(content, list):
        parts = [_unmarked(p) for p in content]
        lone = parts[0] if len(parts) == 1 else None
        out["content"] = lone["text"] if (isinstance(lone, dict) and lone.keys() == TEXT_PART
                                          and lone["type"] == "text") else parts
    return out


TEXT_PART = {"type", "text"}


def _unmarked(item: Any) -> Any:
    return {k: v for k, v in item.items() if k != "cache_control"} \
        if isinstance(item, dict) and "cache_control" in item else item
