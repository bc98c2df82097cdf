"""Typed configuration: YAML in, validated pydantic models out, loaded once.

    config = load_config("config/routegate.yaml")   # raises ConfigError
    config.model("small").price.input_per_mtok

Every section forbids unknown keys, and the cross-references (a team allowing
an undefined model, a policy naming one) are checked in one validator, so a
typo fails at start-up with the file and key path, never at request time.
Non-finite numbers (``.inf``, ``.nan``) are refused everywhere (every section,
here and in ``core/*_config.py``, is a ``core.strict.Strict``), and so is a
key written twice in one YAML mapping.

The routing policy names live above this package (``policies.POLICIES``):
``gateway.cli``'s loader checks them, for ``serve`` and ``check-config`` alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from core.batch_config import BatchSettings
from core.budget_config import BudgetSettings, Limits
from core.cache_config import ResponseCacheConfig
from core.config_errors import ConfigError, UniqueKeyLoader, schema_errors
from core.escalation_config import BreakerConfig, EscalationConfig
from core.learning_config import LearningSettings, ShadowConfig
from core.model_config import (  # the models' section, re-exported: importers read it here
    POOL_NAMES,
    ModelConfig,
    ModelFacts,
    ModelName,
    PoolName,
    Price,
    SimulateConfig,
    Timeouts,
    TransportConfig,
    known_encodings,
)
from core.otel_config import OtelConfig
from core.responses_config import ResponsesSettings
from core.storage_config import StorageSettings
from core.strict import Strict

__all__ = ["POOL_NAMES", "ConfigError", "GatewayConfig", "ModelConfig", "ModelFacts", "ModelName",
           "PoolName",
           "Price", "SimulateConfig", "TeamConfig", "Timeouts", "TransportConfig",
           "known_encodings", "load_config", "parse_config"]


class InteractivePool(Strict):
    ttft_ms: float = Field(default=450, gt=0)
    tpot_ms: float = Field(default=40, gt=0)
    # slo_aware: the most a request may cost, as a multiple of the cheapest model
    # that meets its quality target, to meet the SLO on a dearer one; past it the
    # request stays on a model within that bound (at-risk). None: no bound.
    max_slo_premium: float | None = Field(default=None, ge=1)


class BatchPool(Strict):
    price_multiplier: float = Field(default=0.5, gt=0, le=1)


class Pools(Strict):
    interactive: InteractivePool = InteractivePool()
    batch: BatchPool = BatchPool()


class KeyConfig(Strict):
    hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    name: str | None = None
    budget: Limits | None = None
    default_pool: PoolName | None = None    # None: the team's


KeyEntry = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")] | KeyConfig


class TeamConfig(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    keys: list[KeyEntry] = Field(min_length=1)
    quality: float = Field(default=0.8, gt=0, lt=1)
    budget: Limits | None = None
    allowed_models: list[str] | None = None
    allowed_pools: list[PoolName] | None = None
    # The pool of a request that names none (x-routegate-pool); None: interactive
    # if allowed, else the first allowed pool.
    default_pool: PoolName | None = None
    # POST /v1/feedback on this team's requests (core/learning_config.py)
    feedback: bool = False
    # A model from ``routegate learn`` for this team's requests; None: routing.classifier
    classifier: str | None = None
    # Shadow answers for labels (core/learning_config.py); None: off
    shadow: ShadowConfig | None = None
    # Answers to repeated deterministic requests from Redis (core/cache_config.py); None: off
    response_cache: ResponseCacheConfig | None = None

    def key_configs(self) -> list[KeyConfig]:
        return [KeyConfig(hash=k) if isinstance(k, str) else k for k in self.keys]

    @model_validator(mode="after")
    def _defaults_allowed(self) -> TeamConfig:
        if self.allowed_pools is None:
            return self
        for where, pool in [("default_pool", self.default_pool)] + [
                (f"key {k.name or k.hash[7:19]} default_pool", k.default_pool)
                for k in self.key_configs()]:
            if pool is not None and pool not in self.allowed_pools:
                raise ValueError(f"team {self.name!r}: {where} {pool!r} is not in "
                                 f"allowed_pools {self.allowed_pools}")
        return self


class RoutingConfig(Strict):
    # The cheapest model likely to answer right and meet the pool's SLO (policies/cost_quality.py)
    auto_policy: str = "slo_aware"
    classifier: str | None = None      # artifact path; None: the one shipped in classifiers/
    # cost_quality, when no model reaches the target: how much P(correct) the
    # priciest candidate's price must buy (policies/selection.py)
    unreachable_price_weight: float = Field(default=0.10, ge=0)
    fixed_model: str | None = None
    fallback: bool = True
    max_attempts: int = Field(default=3, ge=1, le=16)
    # Price the upstreams' prefix caches into the choice (gateway/pipeline/warm.py): a
    # conversation's warm model reads its prefix at the cached price and skips its prefill.
    cache_aware: bool = True
    warm_prefix_ttl_s: float = Field(default=300, gt=0, le=86400)   # near the upstreams' cache life


class MetricsConfig(Strict):
    # Off by default, for a scraper on a private network; /metrics shows team
    # names and spend, so turn it on wherever clients can reach the port.
    require_admin_key: bool = False
    # Off only to measure what metrics cost (loadtest's routegate-nolog target).
    enabled: bool = True
    # Minutes of per-minute history kept in Redis for /ui's charts (gateway/observe/history.py);
    # 0: none.
    history_minutes: int = Field(default=60, ge=0, le=1440)


class LoggingConfig(Strict):
    """The request log (gateway/observe/request_log.py): one ``request.completed`` event per request."""

    requests: bool = True       # at log level info; off only to measure what logging costs
    prompts: bool = False       # the request's messages too: opt in, they may hold personal data
    file: bool = True           # JSON lines in data_dir/logs/requests.jsonl (routegate report)
    file_max_mb: float = Field(default=64, gt=0)
    file_backups: int = Field(default=3, ge=0)


class GatewayConfig(Strict):
    models: list[ModelConfig] = Field(min_length=1)
    pools: Pools = Pools()
    teams: list[TeamConfig] = Field(default_factory=list)
    routing: RoutingConfig = RoutingConfig()
    escalation: EscalationConfig = EscalationConfig()
    breaker: BreakerConfig = BreakerConfig()
    budget: BudgetSettings = BudgetSettings()
    batch: BatchSettings = BatchSettings()
    # The name of the variable that holds the admin key (never the key itself).
    admin_key_env: str = Field(default="ROUTEGATE_ADMIN_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    redis_url: str | None = None
    data_dir: str = ".routegate"
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    # JSON objects a body may hold (messages, content parts, tools): counted before it
    # is parsed (gateway/pipeline/request.py), so a body of 200,000 blocks costs ms.
    max_body_objects: int = Field(default=20_000, ge=100, le=10_000_000)
    metrics: MetricsConfig = MetricsConfig()
    logging: LoggingConfig = LoggingConfig()
    otel: OtelConfig = OtelConfig()           # optional traces (gateway/observe/otel.py)
    responses: ResponsesSettings = ResponsesSettings()   # stored /v1/responses (core/responses_config.py)
    learning: LearningSettings = LearningSettings()      # labels from traffic (core/learning_config.py)
    storage: StorageSettings = StorageSettings()         # bulk data apart (core/storage_config.py)

    @model_validator(mode="after")
    def _cross_references(self) -> GatewayConfig:
        names = [m.name for m in self.models]
        every = names + [a for m in self.models for a in m.aliases]
        dupes = {n for n in every if every.count(n) > 1}
        if dupes:
            raise ValueError(f"model names and aliases used twice: {sorted(dupes)}")
        known = set(names)
        for team in self.teams:
            for model in team.allowed_models or []:
                if model not in known:
                    raise ValueError(f"team {team.name!r} allows undefined model {model!r}")
            if team.shadow is not None:
                team.shadow.check(team.name, team.allowed_pools, team.allowed_models,
                                  {m.name: (m.kind, list(m.pools)) for m in self.models})
        if self.routing.fixed_model and self.routing.fixed_model not in known:
            raise ValueError(f"routing.fixed_model names undefined model {self.routing.fixed_model!r}")
        undefined = [n for n in self.escalation.ladder or () if n not in known]
        if undefined:
            raise ValueError(f"escalation.ladder names undefined models {undefined}")
        team_names = [t.name for t in self.teams]
        if len(set(team_names)) != len(team_names):
            raise ValueError("duplicate team names")
        hashes = [k.hash for t in self.teams for k in t.key_configs()]
        if len(set(hashes)) != len(hashes):
            raise ValueError("the same key hash is listed twice")
        # A batch line may run again until its batch ends: its settle must stay
        # idempotent that long (a day more covers its retries and finalizing).
        if self.budget.stable_id_ttl_s < self.batch.max_completion_window_s + 86400:
            raise ValueError(f"budget.stable_id_ttl_s ({self.budget.stable_id_ttl_s}) must be at "
                             "least batch.max_completion_window_s + 86400 "
                             f"({self.batch.max_completion_window_s + 86400})")
        return self

    def model(self, name: str) -> ModelConfig | None:
        """The model called ``name``, or one of its aliases."""
        return next((m for m in self.models if name == m.name or name in m.aliases), None)

    @property
    def effective_redis_url(self) -> str | None:
        return os.environ.get("REDIS_URL") or self.redis_url


def parse_config(data: object, *, source: str = "<config>") -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, schema_errors(exc)) from None


def load_config(path: str | os.PathLike[str],
                check: Callable[[Any], list[tuple[str, str]]] | None = None) -> GatewayConfig:
    """The config at ``path``, or a ConfigError listing every error at once: each
    duplicate key, each schema error, and what ``check`` finds in the raw data
    (the layers above check what ``core`` cannot, such as policy names)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [("(file)", exc.strerror or str(exc))]) from None
    loader = UniqueKeyLoader(text)
    loader.duplicates = []
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [("(yaml)", str(exc))]) from None
    finally:
        loader.dispose()
    errors = [("(yaml)", msg) for msg in loader.duplicates]
    errors += check(data) if check is not None else []
    try:
        config = parse_config(data, source=str(path))
    except ConfigError as exc:
        errors += exc.errors
    if errors:
        raise ConfigError(str(path), errors)
    return config
