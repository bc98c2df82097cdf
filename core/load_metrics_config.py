"""A model's ``load_metrics:`` section: where the upstream publishes its load."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from core.strict import Strict, check_http_url


class LoadMetricsConfig(Strict):
    """An upstream's own load figures (``backends/load_signals.py``).

        load_metrics: {format: vllm}          # polls <base_url origin>/metrics at 1 Hz
        load_metrics: {format: llamacpp, url: http://10.0.0.5:8080/metrics}
    """

    format: Literal["vllm", "sglang", "tgi", "llamacpp", "none"] = "none"
    # One per upstream replica; default: each base_url without /v1, + /metrics.
    url: str | list[str] | None = None
    interval_s: float = Field(default=1.0, ge=0.1, le=60)
    timeout_s: float = Field(default=0.5, gt=0, le=10)
    # Readings older than this are not used: predictions fall back to the
    # replica's own figures.
    stale_s: float = Field(default=3.0, gt=0, le=600)

    @field_validator("url")
    @classmethod
    def _http_urls(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list):
            return [check_http_url(u) for u in value]
        return value if value is None else check_http_url(value)
