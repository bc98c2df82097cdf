"""The ``escalation:`` and ``breaker:`` sections of the gateway YAML.

    escalation:
      max_steps: 2              # models above the first choice one request may try
      ladder: [small, medium, large]   # optional: the order to climb (default: by quality)
      min_confidence: 0.35      # below it, start one step up ("low_confidence")
      min_logprob: null         # e.g. -1.5: escalate answers whose mean token logprob is lower
      stream_mode: buffer       # structured streams: hold until valid (or passthrough)
      deadline_s: 120           # all attempts of one request together
    breaker:
      consecutive_failures: 5   # open after this many failures in a row
      error_rate: 0.5           # or this share of failures ...
      window_s: 30              # ... over this window (with at least min_requests)
      min_requests: 10
      cooldown_s: 10            # then one probe request decides
      max_rest_s: 300           # an upstream 429's Retry-After rests its model at most this long
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.strict import Strict

# The longest an upstream's 429 may rest its model, whatever its Retry-After
# says (and the most the client is told to wait): `Retry-After: 99999999`
# would otherwise take the model out for three years.
DEFAULT_MAX_REST_S = 300.0


class EscalationConfig(Strict):
    enabled: bool = True
    max_steps: int = Field(default=2, ge=0, le=8)
    ladder: list[str] | None = None     # model names, checked in GatewayConfig._cross_references
    min_confidence: float | None = Field(default=None, ge=0, le=1)
    min_logprob: float | None = Field(default=None, le=0)
    stream_mode: Literal["buffer", "passthrough"] = "buffer"
    deadline_s: float = Field(default=120, gt=0)


class BreakerConfig(Strict):
    enabled: bool = True
    consecutive_failures: int = Field(default=5, ge=1)
    error_rate: float = Field(default=0.5, gt=0, le=1)
    window_s: float = Field(default=30, gt=0)
    min_requests: int = Field(default=10, ge=1)
    cooldown_s: float = Field(default=10, gt=0)
    max_rest_s: float = Field(default=DEFAULT_MAX_REST_S, gt=0)   # caps an upstream's Retry-After
    # Opens, closes and rests shared by every replica on the Redis, with one
    # probe for the fleet (scheduling/fleet_health.py); false: each its own.
    shared: bool = True
