"""The wire APIs clients speak, one adapter ("door") each, all into one pipeline.

    doors = build_doors(state)          # in the lifespan: path -> Door
    doors["/v1/chat/completions"]       # OpenAI chat (openai_chat.py), the pipeline's own shape
    doors["/v1/responses"]              # OpenAI Responses (openai_responses/), onto chat
    doors["/v1/messages"]               # Anthropic Messages (anthropic_messages/), onto chat
    doors["/v1/completions"]            # OpenAI legacy completions (openai_completions.py)
    doors["/v1/embeddings"]             # OpenAI embeddings (openai_embeddings.py)

``base.py`` says what a door is. The pipeline speaks OpenAI's protocol (chat
completions, legacy completions and embeddings); a door's request may also go,
as written, to an upstream that speaks the door's own protocol (``/v1/messages``
to an ``anthropic`` model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.protocols.anthropic_messages import MESSAGES_DOOR
from gateway.protocols.base import Door
from gateway.protocols.openai_chat import CHAT_DOOR
from gateway.protocols.openai_completions import COMPLETIONS_DOOR
from gateway.protocols.openai_embeddings import EMBEDDINGS_DOOR
from gateway.protocols.openai_responses import RESPONSES_PATH, ResponsesDoor, ResponseStore

if TYPE_CHECKING:
    from gateway.state import AppState

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
MESSAGES_PATH = "/v1/messages"
DOOR_PATHS = (CHAT_PATH, COMPLETIONS_PATH, EMBEDDINGS_PATH, MESSAGES_PATH, RESPONSES_PATH)


def build_doors(state: AppState) -> dict[str, Door]:
    """Every door, with what it needs from the running gateway."""
    assert state.redis is not None
    return {CHAT_PATH: CHAT_DOOR, COMPLETIONS_PATH: COMPLETIONS_DOOR,
            EMBEDDINGS_PATH: EMBEDDINGS_DOOR, MESSAGES_PATH: MESSAGES_DOOR,
            RESPONSES_PATH: ResponsesDoor(ResponseStore(state.bulk.client, state.config))}
