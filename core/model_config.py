"""A model's section of the config: its price, backend, timeouts, transport and simulator.

    models:
      - name: small
        backend: openai_compat           # or simulated (the demo fleet)
        base_url: http://vllm:8000/v1
        price: {input_per_mtok: 0.10, output_per_mtok: 0.20, cached_input_per_mtok: 0.01}
        context_window: 8192

``core/config.py`` holds the rest of the file and re-exports these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Annotated, Literal

import tiktoken
from pydantic import Field, field_validator, model_validator

from core.load_metrics_config import LoadMetricsConfig
from core.scheduler_config import DEFAULT_MAX_CONCURRENCY, SchedulerConfig
from core.strict import Strict, check_http_url

PoolName = Literal["interactive", "batch"]
# OpenAI's reasoning models refuse max_tokens (o1, o3-mini, o4-mini, gpt-5, gpt-5.1-mini, ...).
REASONING_IDS = re.compile(r"^(?:openai/)?(?:o\d|gpt-5)", re.IGNORECASE)
POOL_NAMES: tuple[PoolName, ...] = ("interactive", "batch")


@lru_cache(maxsize=256)
def _reasoning_id(model_id: str) -> bool:
    """An OpenAI reasoning model's id (o1, o3, gpt-5, ...): read once per id, not per request."""
    return REASONING_IDS.match(model_id) is not None


@cache
def known_encodings() -> frozenset[str]:
    # The registered names only: no BPE file is read or downloaded.
    return frozenset(tiktoken.list_encoding_names())


BREAKPOINT_MIN_TOKENS = 1024   # the least of Anthropic's minimums to cache a prefix
# Backends whose upstream may keep a cache write an hour, at its own price (Bedrock's
# cachePoint has no TTL: its writes are the 5-minute kind).
HOUR_CACHES = frozenset({"anthropic"})


class Price(Strict):
    # Capped so that a request's cost stays a sane nano-USD integer.
    input_per_mtok: float = Field(ge=0, le=1_000_000)
    output_per_mtok: float = Field(ge=0, le=1_000_000)
    # Prompt tokens read from the provider's cache, and written to it; None: the input price.
    # Either may be above the input price: a request's hold prices its prompt at the
    # dearest of the three (gateway/money/ceiling.py).
    cached_input_per_mtok: float | None = Field(default=None, ge=0, le=1_000_000)
    cache_write_per_mtok: float | None = Field(default=None, ge=0, le=1_000_000)
    # A write kept an hour (Anthropic's cache_control ttl "1h"); None: twice the input
    # price, Anthropic's rule (its 5-minute writes are cache_write_per_mtok).
    cache_write_1h_per_mtok: float | None = Field(default=None, ge=0, le=1_000_000)

    @property
    def cached_input(self) -> float:
        return self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok

    @property
    def cache_write(self) -> float:
        return self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok

    @property
    def cache_write_1h(self) -> float:
        return (2 * self.input_per_mtok if self.cache_write_1h_per_mtok is None
                else self.cache_write_1h_per_mtok)


class SimulateConfig(Strict):
    """Knobs of the latency-faithful simulator (``sim/backend.py``)."""

    prefill_tokens_per_s: float = Field(default=4000, gt=0)
    tpot_ms: float = Field(default=20, gt=0, description="decode time per token, batch of one")
    batch_slowdown: float = Field(default=0.04, ge=0, description="tpot grows by this per extra sequence")
    max_batch: int = Field(default=16, ge=1)
    # The KV cache's size in tokens, for the KV-use reading of /metrics; by default
    # KV_TOKENS_PER_SLOT per batch slot, so that the slots bind before the cache does.
    kv_cache_tokens: int | None = Field(default=None, ge=1, le=1 << 30)
    # A prefix cache as vLLM's (sim/prefix_cache.py): cached prompt blocks skip the prefill
    # and are reported as cached_tokens; its size in tokens apart from the running
    # requests' KV (None: it shares kv_cache_tokens with them, as vLLM's does).
    prefix_cache: bool = True
    prefix_cache_tokens: int | None = Field(default=None, ge=16, le=1 << 30)
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
    # openai_compat: OpenAI's chat protocol (OpenAI, vLLM, llama.cpp, ...); anthropic: the
    # Messages API; azure_openai: a deployment (api-version, api-key); bedrock: Converse,
    # SigV4-signed; simulated: the demo fleet, in process.
    backend: Literal["simulated", "openai_compat", "anthropic", "azure_openai", "bedrock"] = "simulated"
    base_url: str | list[str] | None = None
    upstream_model: str | None = None
    api_key_env: str | None = None
    # azure_openai: the api-version query parameter; anthropic: the anthropic-version header
    # (default 2023-06-01). bedrock: the AWS region (its endpoint unless base_url overrides
    # it, e.g. a VPC endpoint). anthropic's base_url defaults to https://api.anthropic.com.
    api_version: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9.-]+$")
    region: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$")
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
    # only max_completion_tokens); None: max_completion_tokens for an OpenAI reasoning
    # model's id (o1, o3, o4-mini, gpt-5, ...), else the client's own.
    output_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None
    timeouts: Timeouts = Timeouts()
    transport: TransportConfig = TransportConfig()
    simulate: SimulateConfig | None = None
    scheduler: SchedulerConfig = SchedulerConfig()
    load_metrics: LoadMetricsConfig | None = None
    # Whether the upstream reads a repeated prompt prefix from a cache: cache-aware routing
    # prices the turns a model served at its cached price, with no prefill, only where it
    # does. automatic: any repeated prefix (vLLM, SGLang, llama.cpp, OpenAI, Azure);
    # breakpoints: up to the request's cache_control marks, none without (Anthropic,
    # Bedrock); none. auto: by backend (a simulated model: its simulate.prefix_cache).
    prefix_cache: Literal["auto", "automatic", "breakpoints", "none"] = "auto"
    # A breakpoint cache keeps nothing shorter than this many tokens (Anthropic's minimum by
    # model: 1,024 for Sonnet 4.5 and Opus 4.1; 2,048 for Sonnet 4.6 and the Haiku 3s;
    # 4,096 for Haiku 4.5 and Opus 4.5). None: 1,024 for a breakpoint cache, else 0.
    prefix_cache_min_tokens: int | None = Field(default=None, ge=0, le=1 << 20)

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
        if self.backend in ("openai_compat", "azure_openai") and not self.base_url:
            raise ValueError(f"{self.backend} models need base_url")
        if self.backend == "bedrock" and not (self.region or self.base_url):
            raise ValueError("bedrock models need region (or base_url)")
        if self.backend == "bedrock" and self.kind == "embedding":
            raise ValueError("bedrock serves chat models here (Converse); its embedding "
                             "models (InvokeModel) are not supported")
        if self.backend in ("azure_openai", "bedrock") and not self.upstream_model:
            raise ValueError(f"{self.backend} models need upstream_model (the deployment or model id)")
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
    def cache_min_tokens(self) -> int:
        """``prefix_cache_min_tokens`` resolved: the shortest prefix its cache keeps."""
        if self.prefix_cache_min_tokens is not None:
            return self.prefix_cache_min_tokens
        return BREAKPOINT_MIN_TOKENS if self.prefix_cache_kind == "breakpoints" else 0

    @property
    def prefix_cache_kind(self) -> str:
        """``prefix_cache`` with ``auto`` resolved by backend."""
        if self.prefix_cache != "auto":
            return self.prefix_cache
        if self.backend in ("anthropic", "bedrock"):
            return "breakpoints"
        if self.backend == "simulated":
            return "automatic" if self.simulate is None or self.simulate.prefix_cache else "none"
        return "automatic"

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
    def output_cap_param(self) -> str | None:
        """The output cap's name upstream (``output_tokens_param``, or read off the id)."""
        if self.output_tokens_param is not None:
            return self.output_tokens_param
        if self.backend in ("openai_compat", "azure_openai") and _reasoning_id(self.wire_model):
            return "max_completion_tokens"
        return None

    @property
    def max_concurrency(self) -> int:
        """Requests the gateway runs on this model at once: per replica, times replicas."""
        per_replica = self.scheduler.max_concurrency or (
            self.simulate.max_batch if self.simulate else DEFAULT_MAX_CONCURRENCY)
        return per_replica * max(1, len(self.base_urls))


@dataclass(frozen=True, slots=True)
class Rates:
    """A ``Price`` read once: USD per million tokens, cached and written ones apart."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input: float
    cache_write: float
    cache_write_1h: float
    # A prompt token's price when it is held before the answer: the dearest of those it
    # can be billed at (a cached read may be priced above the input, a write usually is;
    # a write kept an hour only upstreams that keep one, ``hour``, bill).
    prompt_held: float

    @classmethod
    def of(cls, p: Price, hour: bool = False) -> Rates:
        return cls(p.input_per_mtok, p.output_per_mtok, p.cached_input, p.cache_write,
                   p.cache_write_1h,
                   max(p.input_per_mtok, p.cached_input, p.cache_write,
                       p.cache_write_1h if hour else 0.0))


@dataclass(frozen=True, slots=True, eq=False)
class ModelFacts:
    """What the request path reads of a model, read out of its config once.

        facts = ModelFacts.of(config.models[0])
        facts.price.input_per_mtok, facts.wire_model, facts.config.transport

    The config sections are pydantic models, and pydantic's ``__getattr__`` keeps
    CPython 3.11 from specializing a read of one: each costs some 400 instructions
    against a few dozen for a plain attribute, and a request read about 70 of them
    (``docs/benchmarks.md``). The names are the config's, so code reads either alike;
    the rest of the config is ``config``."""

    config: ModelConfig
    name: str
    kind: str
    backend: str
    tokenizer: str
    context_window: int
    max_output_tokens: int
    pools: tuple[str, ...]
    ability: float
    family: str | None
    wire_model: str
    output_cap_param: str | None
    energy_j_per_token: float | None
    price: Rates
    simulate: SimulateConfig | None
    first_byte_s: float         # timeouts.first_byte_s
    prefix_cache: str           # prefix_cache_kind: automatic | breakpoints | none
    cache_min_tokens: int       # the shortest prefix its cache keeps

    @classmethod
    def of(cls, m: ModelConfig) -> ModelFacts:
        return cls(m, m.name, m.kind, m.backend, m.tokenizer, m.context_window,
                   m.max_output_tokens, tuple(m.pools), m.ability, m.family, m.wire_model,
                   m.output_cap_param, m.energy_j_per_token,
                   Rates.of(m.price, m.backend in HOUR_CACHES),
                   m.simulate, m.timeouts.first_byte_s, m.prefix_cache_kind,
                   m.cache_min_tokens)
