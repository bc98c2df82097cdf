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
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import tiktoken
import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from core.batch_config import BatchSettings
from core.budget_config import BudgetSettings, Limits
from core.config_errors import ConfigError, UniqueKeyLoader, schema_errors
from core.escalation_config import BreakerConfig, EscalationConfig
from core.learning_config import LearningSettings, ShadowConfig
from core.load_metrics_config import LoadMetricsConfig
from core.otel_config import OtelConfig
from core.responses_config import ResponsesSettings
from core.scheduler_config import DEFAULT_MAX_CONCURRENCY, SchedulerConfig
from core.storage_config import StorageSettings
from core.strict import Strict, check_http_url

PoolName = Literal["interactive", "batch"]
POOL_NAMES: tuple[PoolName, ...] = ("interactive", "batch")


@cache
def known_encodings() -> frozenset[str]:
    # The registered names only: no BPE file is read or downloaded.
    return frozenset(tiktoken.list_encoding_names())


class Price(Strict):
    # Capped so that a request's cost stays a sane nano-USD integer.
    input_per_mtok: float = Field(ge=0, le=1_000_000)
    output_per_mtok: float = Field(ge=0, le=1_000_000)


class SimulateConfig(Strict):
    """Knobs of the latency-faithful simulator (``sim/backend.py``)."""

    prefill_tokens_per_s: float = Field(default=4000, gt=0)
    tpot_ms: float = Field(default=20, gt=0, description="decode time per token, batch of one")
    batch_slowdown: float = Field(default=0.04, ge=0, description="tpot grows by this per extra sequence")
    max_batch: int = Field(default=16, ge=1)
    # The KV cache's size in tokens, for the KV-use reading of /metrics; by default
    # KV_TOKENS_PER_SLOT per batch slot, so that the slots bind before the cache does.
    kv_cache_tokens: int | None = Field(default=None, ge=1, le=1 << 30)
    output_tokens_mean: int = Field(default=120, ge=1)
    error_rate: float = Field(default=0, ge=0, le=1)
    timeout_rate: float = Field(default=0, ge=0, le=1)
    drop_rate: float = Field(default=0, ge=0, le=1)
    invalid_json_rate: float = Field(default=0, ge=0, le=1)
    invalid_tool_args_rate: float = Field(default=0, ge=0, le=1)
    # Mean token logprob of this model's answers (logprobs are drawn around it):
    # a weak model is less sure of itself, which escalation.min_logprob can act on.
    logprob_mean: float = Field(default=-0.5, le=0)
    seed: int | None = None
    # An embedding model's vectors (kind: embedding), when the request names no dimensions.
    embedding_dimensions: int = Field(default=256, ge=1, le=8192)


class Timeouts(Strict):
    """Upstream timeouts (README, "Timeouts")."""

    connect_s: float = Field(default=3, gt=0)          # TCP (and TLS) connect
    first_byte_s: float = Field(default=60, gt=0)      # request sent -> first response byte
    between_chunks_s: float = Field(default=30, gt=0)  # streams: silence between two reads
    total_s: float = Field(default=600, gt=0)          # non-streamed: the whole answer
    pool_wait_s: float = Field(default=5, gt=0)        # waiting for a free upstream connection


class TransportConfig(Strict):
    """How a model's upstream HTTP is sent (``backends/transport.py``).

    ``auto``: the lean httptools client for plain ``http://`` upstreams with no
    proxy in the environment, else aiohttp (TLS, ``HTTPS_PROXY``, ...)."""

    kind: Literal["auto", "lean", "aiohttp"] = "auto"
    max_connections: int = Field(default=64, ge=1)     # per upstream host
    max_queue: int = Field(default=1024, ge=0)         # requests waiting for a connection
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    idle_s: float = Field(default=4.0, gt=0)           # below common upstream keep-alives (5 s)
    dns_ttl_s: float = Field(default=60.0, ge=0)


ModelName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9._:/-]+$")]


class ModelConfig(Strict):
    name: ModelName
    # chat: /v1/chat/completions, /v1/completions and the doors translated onto chat;
    # embedding: /v1/embeddings only, named explicitly, never classified or routed.
    kind: Literal["chat", "embedding"] = "chat"
    # Other names clients may use for this model (e.g. gpt-4o-mini), in every door.
    aliases: list[ModelName] = Field(default_factory=list, max_length=64)
    backend: Literal["simulated", "openai_compat"] = "simulated"
    base_url: str | list[str] | None = None
    upstream_model: str | None = None
    api_key_env: str | None = None
    price: Price
    context_window: int = Field(default=8192, ge=16)
    max_output_tokens: int = Field(default=2048, ge=1)
    pools: list[PoolName] = Field(default_factory=lambda: list(POOL_NAMES))
    ability: float = Field(default=0.5, gt=0, lt=1)
    family: str | None = None
    tokenizer: str = "o200k_base"
    energy_j_per_token: float | None = Field(default=None, ge=0)
    # How far above its learned count an upstream's prompt_tokens may be reserved
    # and billed (gateway/money/prompt_meter.py): the fit times (1 + margin).
    prompt_margin: float = Field(default=0.25, ge=0, le=4)
    # The name the upstream reads the output cap under (OpenAI's reasoning models take
    # only max_completion_tokens); None: the client's own, one of the two if it sent both.
    output_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None
    timeouts: Timeouts = Timeouts()
    transport: TransportConfig = TransportConfig()
    simulate: SimulateConfig | None = None
    scheduler: SchedulerConfig = SchedulerConfig()
    load_metrics: LoadMetricsConfig | None = None

    @field_validator("base_url")
    @classmethod
    def _http_urls(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list):
            if not value:
                raise ValueError("base_url lists at least one URL")
            return [check_http_url(u) for u in value]
        return value if value is None else check_http_url(value)

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: str) -> str:
        if value not in known_encodings():
            raise ValueError(f"unknown tokenizer {value!r}; known: {sorted(known_encodings())}")
        return value

    @model_validator(mode="after")
    def _backend_fields(self) -> ModelConfig:
        if self.backend == "openai_compat" and not self.base_url:
            raise ValueError("openai_compat models need base_url")
        if self.backend == "simulated" and self.base_url:
            raise ValueError("simulated models run in-process; use openai_compat for a URL")
        for name in (self.name, *self.aliases):
            if name == "auto" or name.startswith("auto:"):
                raise ValueError("'auto' is reserved for routing")
        lm = self.load_metrics
        if lm is not None and lm.format != "none" and not lm.url and not self.base_url:
            raise ValueError("load_metrics needs a url (or the model a base_url)")
        return self

    @property
    def base_urls(self) -> list[str]:
        if self.base_url is None:
            return []
        urls = [self.base_url] if isinstance(self.base_url, str) else self.base_url
        return [u.rstrip("/") for u in urls]

    @property
    def wire_model(self) -> str:
        return self.upstream_model or self.name

    @property
    def max_concurrency(self) -> int:
        """Requests the gateway runs on this model at once: per replica, times replicas."""
        per_replica = self.scheduler.max_concurrency or (
            self.simulate.max_batch if self.simulate else DEFAULT_MAX_CONCURRENCY)
        return per_replica * max(1, len(self.base_urls))


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
    max_attempts: int = Field(default=3, ge=1)


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
