"""Anthropic's Messages API as an upstream (``backend: anthropic``), one module per job.

    backend.py     AnthropicBackend: HTTP, headers, native calls (``backends/base.py``)
    stream.py      an open stream, read as chat chunks or relayed natively
    to_wire.py     an OpenAI chat body -> a Messages request (pure)
    from_wire.py   a Messages answer -> a chat.completion, and the usage (pure)
    events.py      Messages stream events -> chat.completion.chunks (pure)
    errors.py      Anthropic's statuses and error events -> ``core.errors``
"""

from backends.anthropic_messages.backend import AnthropicBackend

__all__ = ["AnthropicBackend"]
