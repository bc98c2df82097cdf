"""The wire APIs clients speak, one adapter ("door") each, all into one pipeline.

    doors = build_doors(state)          # in the lifespan: path -> Door
    doors["/v1/chat/completions"]       # OpenAI chat (gateway/protocols/openai_chat.py)

``base.py`` says what a door is. Upstreams always speak OpenAI's protocol:
chat completions, legacy completions and embeddings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.protocols.base import Door
from gateway.protocols.openai_chat import CHAT_DOOR
from gateway.protocols.openai_responses import RESPONSES_PATH, ResponsesDoor, ResponseStore

if TYPE_CHECKING:
    from gateway.state import AppState

CHAT_PATH = "/v1/chat/completions"
DOOR_PATHS = (CHAT_PATH, RESPONSES_PATH)


def build_doors(state: AppState) -> dict[str, Door]:
    """Every door, with what it needs from the running gateway."""
    assert state.redis is not None
    return {CHAT_PATH: CHAT_DOOR,
            RESPONSES_PATH: ResponsesDoor(ResponseStore(state.redis.client, state.config))}
