"""Everything a running gateway holds, created once in the app's lifespan.

    state = await AppState.start(config)     # backends, router, redis, budget
    ...
    await state.aclose()

Handlers reach it as ``request.app.state.gw``; there are no module globals.
The budget calls (``reserve_budget`` / ``settle_budget``) are the two Redis
round trips on the request path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from backends.base import Backend, Usage
from backends.openai_compat import OpenAICompatBackend, new_session
from backends.simulated import SimulatedBackend
from classifiers.complexity import ComplexityModel
from classifiers.length import counter_for
from gateway.auth import Caller, KeyRing
from gateway.config import GatewayConfig, ModelConfig
from gateway.features import RequestFeatures
from gateway.request import ChatRequest
from gateway.routing import Router
from gateway.telemetry import Telemetry
from policies import Decision

if TYPE_CHECKING:
    from gateway.exchange import Exchange

logger = logging.getLogger("routegate.state")


def build_backends(config: GatewayConfig, session: aiohttp.ClientSession) -> dict[str, Backend]:
    backends: dict[str, Backend] = {}
    for model in config.models:
        if model.backend == "simulated":
            backends[model.name] = SimulatedBackend(model)
        else:
            backends[model.name] = OpenAICompatBackend(model, session)
    return backends


@dataclass
class AppState:
    config: GatewayConfig
    keyring: KeyRing
    session: aiohttp.ClientSession
    backends: dict[str, Backend]
    router: Router
    telemetry: Telemetry
    classifier: ComplexityModel | None = None
    redis: Any = None
    budget: Any = None
    replica_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.models: dict[str, ModelConfig] = {m.name: m for m in self.config.models}

    @classmethod
    async def start(cls, config: GatewayConfig) -> AppState:
        session = new_session()
        backends = build_backends(config, session)
        classifier = await asyncio.to_thread(ComplexityModel.load, config.routing.classifier)
        router = Router(config, backends, classifier)
        # Load tiktoken's files now, not on the first request (about 0.5 s each).
        await asyncio.to_thread(lambda: [counter_for(enc) for enc in router.encodings])
        state = cls(config=config, keyring=KeyRing.from_config(config), session=session,
                    backends=backends, router=router, telemetry=Telemetry(),
                    classifier=classifier)
        return state

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for backend in self.backends.values():
            await backend.aclose()
        await self.session.close()

    # -- budget seams: one Redis round trip before the upstream call, one after --

    def soft_limited(self, caller: Caller) -> bool:
        return False

    async def reserve_budget(self, ex: Exchange, chat: ChatRequest, decision: Decision,
                             features: RequestFeatures) -> None:
        return None

    async def settle_budget(self, ex: Exchange, model: ModelConfig | None,
                            usage: Usage | None) -> None:
        return None

    async def redis_ready(self) -> bool:
        return True
