"""The ``learning:`` section of the gateway YAML: labels from the traffic, for ``routegate learn``.

    learning:
      labels: true                  # record labels from escalations (and feedback, per team)
      feedback_window_s: 86400      # POST /v1/feedback is taken for a request this long
      feedback_max_misses: 120      # per team: feedback on unknown ids per window, then 429
      feedback_miss_window_s: 60
      keep_labels: 200000           # per team, the newest kept (a Redis stream, trimmed)
      keep_days: 90                 # and none older
      max_pending: 20000            # per replica, labels and served records waiting to be written

    teams:
      - name: acme
        feedback: true              # remember each served request's sketch for POST /v1/feedback
        classifier: learned/acme    # route this team with a model from routegate learn
        shadow: {rate: 0.02, model: large, judge: medium}   # answer 2% again, compare

A label is (a sketch of the prompt, the model, a score in [0, 1], its source,
its time), kept per team in Redis under the team's hash tag
(``labelling/keys.py``). The prompt's text is kept too only with
``logging.prompts: true``. Escalations label every request that climbed, at
no cost to the others. Feedback costs a sketch and one pipelined write per
request of a team that turns it on, off the request path; past
``max_pending`` waiting writes a replica drops the newest and counts them
(``routegate_labels_total{result="dropped"}``).

Shadow answers (``gateway/pipeline/shadow.py``): after the client has its
answer, ``rate`` of the team's routed chat requests (exactly: every
1/rate-th, per replica) are answered again by ``model`` in the batch pool,
billed to the team, and compared: exactly where the answer has a checkable
form (JSON, tool calls, a marked final number), else by ``judge`` (two
pairwise calls, positions swapped); with no judge, only checkable answers
are compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from core.strict import Strict

DAY_S = 86400


class LearningSettings(Strict):
    labels: bool = True
    feedback_window_s: int = Field(default=DAY_S, ge=60, le=30 * DAY_S)
    keep_labels: int = Field(default=200_000, ge=100, le=500_000)   # what learn reads at most
    keep_days: float = Field(default=90, gt=0, le=3650)
    max_pending: int = Field(default=20_000, ge=100, le=1_000_000)
    # Feedback on an id the team has no answer under (or scored already), per team and
    # window, shared by the replicas (gateway/guard.py): past it, 429 until the window ends.
    feedback_max_misses: int = Field(default=120, ge=1, le=1_000_000)
    feedback_miss_window_s: int = Field(default=60, ge=1, le=3600)


class ShadowConfig(Strict):
    rate: float = Field(gt=0, le=0.5)
    model: str                     # the stronger model that answers again
    judge: str | None = None       # compares free-form answers; None: checkable ones only

    def check(self, team: str, allowed_pools: Sequence[str] | None, allowed_models: list[str] | None,
              models: Mapping[str, tuple[str, list[str]]]) -> None:
        """The shadow and judge of ``team``: chat models it may use, in the batch pool.
        ``models``: every model's kind and pools, by name."""
        if allowed_pools is not None and "batch" not in allowed_pools:
            raise ValueError(f"team {team!r}: shadow answers run in the batch pool, "
                             "which its allowed_pools exclude")
        for role, name in (("model", self.model), ("judge", self.judge)):
            if name is None:
                continue
            model = models.get(name)
            if model is None:
                raise ValueError(f"team {team!r}: shadow.{role} names undefined model {name!r}")
            kind, pools = model
            if kind != "chat" or "batch" not in pools:
                raise ValueError(f"team {team!r}: shadow.{role} {name!r} must be a chat "
                                 "model in the batch pool")
            if allowed_models is not None and name not in allowed_models:
                raise ValueError(f"team {team!r}: shadow.{role} {name!r} is not in its "
                                 "allowed_models")
