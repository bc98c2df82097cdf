"""A model's ``scheduler:`` section: how many requests it runs at once, and how
long the rest may queue (``scheduling/scheduler.py``).

    models:
      - name: large
        scheduler:
          max_concurrency: 8        # per upstream replica; default simulate.max_batch, else 64
          interactive_queue: 256    # waiting interactive requests, beyond which 429 at once
          batch_queue: 4096
          interactive_wait_s: 5     # longest an interactive request queues, then 503
          batch_wait_s: 120
          batch_reserve: 0.25       # share of the slots batch may never take
          batch_backoff: 0.6        # batch waits once predicted interactive TTFT > 0.6 x SLO
          interactive_lifo_after_s: 0.2   # a standing queue serves its newest first
          refuse_late: false        # true: refuse (503) interactive work predicted to be late
          shared_backlog: true      # with refuse_late and replicas: count the fleet's backlog in Redis
"""

from __future__ import annotations

from pydantic import Field

from core.strict import Strict

# Without simulator knobs, a model runs as many requests as its transport has
# connections (``TransportConfig.max_connections``): the gateway never queues
# what the upstream connection pool would have let through.
DEFAULT_MAX_CONCURRENCY = 64


class SchedulerConfig(Strict):
    max_concurrency: int | None = Field(default=None, ge=1, le=100_000)
    interactive_queue: int = Field(default=256, ge=0)
    batch_queue: int = Field(default=4096, ge=0)
    interactive_wait_s: float = Field(default=5.0, gt=0, le=3600)
    batch_wait_s: float = Field(default=120.0, gt=0, le=86_400)
    # Slots kept free of batch work, so an interactive arrival finds one at
    # once instead of waiting for a batch answer to finish (seconds, not ms).
    batch_reserve: float = Field(default=0.25, ge=0, lt=1)
    batch_backoff: float = Field(default=0.6, gt=0, le=1)
    # Once the oldest interactive waiter has queued this long, the newest goes
    # first (scheduling/scheduler.py, adaptive LIFO); at interactive_wait_s or
    # more the queue stays first come, first served.
    interactive_lifo_after_s: float = Field(default=0.2, ge=0)
    # On-time admission (after Mooncake's prediction-based early rejection): an
    # interactive request predicted to queue past the pool's TTFT SLO is refused
    # at once (503 ``slo_unreachable``, retry-after), and one that has waited the
    # SLO gives up then (503 ``queue_timeout``). Past saturation, a late answer
    # holds a slot for seconds that an on-time one needed. Off by default: a
    # late answer can be better than none, and the client may not retry.
    refuse_late: bool = False
    # With refuse_late and more than one gateway replica, every admission adds its
    # prompt to the fleet's prefill backlog in Redis, and a request with a free
    # slot is judged on the count it reads back (scheduling/shared_backlog.py): one
    # round trip per admission. false: predict from the heartbeat's figures (0.25 s
    # old) and the upstream's /metrics only, with no call on the request path.
    shared_backlog: bool = True
