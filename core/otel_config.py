"""The ``otel:`` section of the gateway YAML: optional OpenTelemetry traces.

    otel:
      endpoint: http://collector:4318   # OTLP/HTTP (protobuf); null: no tracing at all
      service_name: routegate
      sample_ratio: 1.0                 # share of new traces kept; a client's sampled flag wins

An endpoint without a path gets OTLP's ``/v1/traces``; one with a path is
used as written. Off by default: the gateway then never imports the SDK
(``gateway/observe/otel.py``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from core.strict import Strict


class OtelConfig(Strict):
    endpoint: str | None = None
    service_name: str = Field(default="routegate", min_length=1)
    sample_ratio: float = Field(default=1.0, ge=0, le=1)

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
        return value if parts.path.strip("/") else value.rstrip("/") + "/v1/traces"

    @property
    def enabled(self) -> bool:
        return self.endpoint is not None
