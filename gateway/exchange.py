"""One request's bookkeeping from arrival to the last byte.

An ``Exchange`` is created when a request arrives and finished exactly once,
whatever happens: success, error, or a client that went away mid-stream.
Finishing settles the budget reservation to the real usage and emits the one
``request.completed`` event.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.base import Usage
from core.config import ModelConfig
from core.errors import GatewayError
from gateway.auth import Caller
from gateway.spend import settle_budget
from gateway.telemetry import RequestRecord

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.exchange")


def new_request_id(incoming: str | None) -> str:
    if incoming and len(incoming) <= 128 and incoming.isprintable():
        return incoming
    return f"req_{os.urandom(12).hex()}"


@dataclass(slots=True)
class Exchange:
    gw: AppState
    request_id: str
    started: float = field(default_factory=time.perf_counter)
    caller: Caller | None = None
    reservation: Any = None
    record: RequestRecord = field(init=False)
    finished: bool = False

    def __post_init__(self) -> None:
        self.record = RequestRecord(request_id=self.request_id)

    def identify(self, caller: Caller) -> None:
        self.caller = caller
        self.record.team = caller.team.name
        self.record.key = caller.key_id

    def response_headers(self, model: str | None = None) -> dict[str, str]:
        headers = {"x-request-id": self.request_id}
        if model:
            headers["x-routegate-model"] = model
        if self.record.reason:
            headers["x-routegate-reason"] = self.record.reason
        if self.record.budget:
            headers["x-routegate-budget"] = self.record.budget
        return headers

    async def finish(self, model: ModelConfig | None, usage: Usage | None, *,
                     ttft_s: float | None = None, tpot_s: float | None = None,
                     error: GatewayError | None = None) -> None:
        """Settle and report, once. Never raises: the response is already decided."""
        if self.finished:
            return
        self.finished = True
        rec = self.record
        rec.latency_s = time.perf_counter() - self.started
        rec.ttft_s, rec.tpot_s = ttft_s, tpot_s
        if error is not None:
            rec.status, rec.error_code = error.status_code, error.code
        if model is not None:
            rec.model = model.name
        if usage is not None and model is not None:
            rec.prompt_tokens, rec.completion_tokens = usage.prompt_tokens, usage.completion_tokens
            rec.usage_estimated = usage.estimated
            rec.cost_usd = (usage.prompt_tokens * model.price.input_per_mtok
                            + usage.completion_tokens * model.price.output_per_mtok) / 1e6
            if model.energy_j_per_token is not None:
                rec.energy_j = model.energy_j_per_token * (
                    usage.prompt_tokens + usage.completion_tokens)
        try:
            await settle_budget(self.gw, self, model, usage)
        except Exception:  # settling must never break a response already sent
            logger.exception("request %s: settling the budget failed", self.request_id)
        self.gw.telemetry.request_completed(rec)
