"""What happened to one request: the value ``serve`` returns.

It is filled in by the pipeline alone, and read by telemetry (the one
``request.completed`` event and the Prometheus metrics) and by the batch
worker (status and body of each line).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Share:
    """One model's part of a request billed on several (an escalation's replaced answer
    and the one delivered): the per-model metrics file each part under its own model."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_usd: float
    saved_usd: float           # by its prompt cache
    premium_usd: float         # its cache writes above the input price


@dataclass(slots=True)
class Outcome:
    request_id: str                      # the gateway's own id (budget idempotency)
    client_request_id: str | None = None  # the client's x-request-id, echoed and logged only
    endpoint: str = "chat"               # the door it came through (gateway/protocols/)
    team: str | None = None
    key: str | None = None
    pool: str = "interactive"
    model: str | None = None             # the model whose answer the client got
    reason: str | None = None
    status: int = 200
    error_code: str | None = None
    stream: bool = False
    attempts: int = 0
    escalations: list[str] | None = None  # why the request climbed: low_confidence, invalid_json
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0               # of the prompt, read from the upstream's prompt cache
    cache_write_tokens: int = 0          # of the prompt, written to it (Anthropic, Bedrock)
    cache_saved_usd: float = 0.0         # what caches saved: cached tokens, or a response-cache hit
    cache_write_premium_usd: float = 0.0  # what prompt-cache writes cost above the input price
    response_cache: str | None = None    # "hit" | "miss": the team's response cache was asked
    usage_estimated: bool = False
    usage_anomaly: str | None = None     # "negative" | "over_cap" | "unreadable": usage corrected
    cost_usd: float = 0.0
    shares: list[Share] | None = None    # per model, when the bill's lines are on several
    overdraft_usd: float | None = None   # billed above the reservation (the upstream counted more)
    energy_j: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    latency_s: float = 0.0
    predicted_quality: float | None = None
    confidence: float | None = None
    budget: str | None = None
    slo: str | None = None               # "at-risk": the chosen model was predicted to miss the SLO
    # issue 13 (request log and metrics)
    trace_id: str | None = None          # W3C trace id, sent upstream in traceparent
    fallbacks: list[str] | None = None   # error codes of attempts that fell back to another model
    classify_s: float | None = None      # time in the complexity classifier
    prompt: list | None = None           # the messages; logged only with logging.prompts

    def response_headers(self) -> dict[str, str]:
        headers = {"x-request-id": self.client_request_id or self.request_id,
                   "x-routegate-request-id": self.request_id}
        if self.model:
            headers["x-routegate-model"] = self.model
        if self.reason:
            headers["x-routegate-reason"] = self.reason
        if self.budget:
            headers["x-routegate-budget"] = self.budget
        if self.slo:
            headers["x-routegate-slo"] = self.slo
        if self.response_cache:
            headers["x-routegate-cache"] = self.response_cache
        return headers
