"""What one request tried, and how its answers are judged.

    attempts = Attempts()                       # filled in by the attempt loop
    attempts.header()                           # "small:invalid_json,medium:ok"
    check = AnswerCheck.for_request(Checking.of(config.escalation), req)  # None: none

Every attempt that produced output is billed, the ones whose answers were
discarded included (``discarded``): the team pays honestly for every try.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.base import Completion
from core.config import ModelFacts
from core.escalation_config import EscalationConfig
from core.usage import Usage
from gateway.pipeline.answers import HeldStream, completion_message
from gateway.pipeline.request import CHAT, ModelRequest
from policies.validators import check_answer, is_structured


@dataclass(slots=True)
class Attempt:
    model: ModelFacts
    outcome: str                      # "ok", an error code, or why the answer was refused
    usage: Usage | None = None        # a discarded answer's reported usage
    answer: Any = None                # a discarded non-streamed answer (counted if no usage)
    chunks: int = 0                   # a discarded stream's token chunks


@dataclass(slots=True)
class Attempts:
    model: ModelFacts | None = None  # the one called last: it answered, or failed last
    started: bool = False             # its call went upstream (it was not refused or queued)
    replica: int | None = None        # which of its replicas (base_urls) the call went to
    tried: list[Attempt] = field(default_factory=list)
    escalations: list[str] = field(default_factory=list)   # reasons, in order

    @property
    def count(self) -> int:
        return len(self.tried)

    @property
    def discarded(self) -> list[Attempt]:
        """Attempts whose output was generated (and so is billed) but not delivered."""
        return [a for a in self.tried if a.usage is not None or a.answer is not None or a.chunks]

    @property
    def fallback_reasons(self) -> list[str]:
        """Why attempts failed before another one was made (error codes, not refusals)."""
        return [a.outcome for a in self.tried[:-1]
                if a.outcome != "ok" and a.outcome not in self.escalations]

    def header(self) -> str:
        return ",".join(f"{a.model.name}:{a.outcome}" for a in self.tried)


@dataclass(frozen=True, slots=True)
class Checking:
    """``escalation``'s answer checks, read out of the config once (``gw.switches``)."""

    enabled: bool
    min_logprob: float | None
    buffer_streams: bool        # stream_mode: buffer

    @classmethod
    def of(cls, config: EscalationConfig) -> Checking:
        return cls(config.enabled, config.min_logprob, config.stream_mode == "buffer")


@dataclass(frozen=True, slots=True)
class AnswerCheck:
    """How to verify one request's answers before the client gets them."""

    request: dict[str, Any]
    min_logprob: float | None
    hold_streams: bool
    added_logprobs: bool

    @classmethod
    def for_request(cls, config: Checking, req: ModelRequest) -> AnswerCheck | None:
        if not config.enabled or req.operation != CHAT:   # only chat answers are checked
            return None
        structured = is_structured(req.body)
        # A plain-text stream is never held, so an answer's confidence can only
        # be judged where the whole answer is read before it is sent.
        min_lp = config.min_logprob if (not req.stream or structured) else None
        if not structured and min_lp is None:
            return None
        return cls(req.body, min_lp, req.stream and config.buffer_streams,
                   min_lp is not None and not req.body.get("logprobs"))

    def judge(self, result: Completion | HeldStream) -> str | None:
        """Why this answer cannot be given to the client, or None."""
        if isinstance(result, Completion):
            message, finish, logprobs = completion_message(result.data)
        else:
            message, finish, logprobs = result.message()
        return check_answer(self.request, message, finish, logprobs,
                            min_logprob=self.min_logprob)
