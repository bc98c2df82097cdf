"""Everything a running gateway holds, created once in the app's lifespan.

    state = await AppState.start(config)     # backends, router, redis, budget
    ...
    await state.aclose()

Handlers reach it as ``request.app.state.gw``; there are no module globals.
The budget calls (``reserve_budget`` / ``settle_budget``) are the two Redis
round trips on the request path.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.base import Backend
from backends.load_signals import start_pollers
from budget import BudgetStore, RedisHandle, open_redis
from budget.eviction import eviction_risk
from budget.keys import KeySpace
from budget.redis_client import subscribers
from classifiers.complexity import ComplexityModel
from classifiers.length import counter_for
from core.config import GatewayConfig, ModelFacts
from gateway.auth import Caller, KeyRing
from gateway.batch_runner import BatchService, open_batch_service
from gateway.bulk import QuotaStore
from gateway.money.ceiling import Tariff
from gateway.observe.history import History
from gateway.observe.otel import NOOP, Tracer, start_tracer
from gateway.observe.telemetry import Telemetry
from gateway.pipeline.attempts import Checking
from gateway.pipeline.response_cache import ResponseCache
from gateway.pipeline.routing import Router
from gateway.pipeline.shadow import Shadows
from gateway.pipeline.warm import WarmPrefixes
from gateway.protocols import build_doors
from gateway.protocols.base import Door
from gateway.upstreams import build_backends
from labelling.recorder import Recorder
from labelling.store import LabelStore
from scheduling.breaker import Breaker
from scheduling.fleet import FleetShare
from scheduling.fleet_health import FleetHealth
from scheduling.scheduler import PoolScheduler, build_schedulers, share_backlogs

logger = logging.getLogger("routegate.state")


def load_classifier(path: str | None, fallback: str = "model ability only"
                    ) -> ComplexityModel | None:
    """The complexity model; routing degrades to ``fallback`` without it."""
    try:
        return ComplexityModel.load(path)
    except Exception as exc:  # a half-copied file raises BadZipFile, zlib.error, EOFError...
        logger.error("complexity classifier %s unavailable (%s: %s); routing on %s",
                     path or "(shipped)", type(exc).__name__, exc, fallback)
        return None


# An artifact file's (mtime, size, inode): None when it cannot be read.
Stamp = tuple[int, int, int] | None
# A team classifier as loaded: the model, and its artifact's stamp then.
LoadedClassifier = tuple[ComplexityModel, Stamp]
# Classifiers loaded by path, e.g. by the config check.
Classifiers = dict[str, LoadedClassifier]


def artifact_stamp(path: str) -> Stamp:
    """What tells a rewritten artifact apart (``os.replace`` gives a new inode;
    a copy in place a new mtime or size)."""
    try:
        st = os.stat(ComplexityModel.artifact_file(path))
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def load_team_classifiers(config: GatewayConfig,
                          loaded: dict[str, LoadedClassifier] | None = None
                          ) -> dict[str, LoadedClassifier]:
    """The models ``teams[].classifier`` name, by path. One in ``loaded`` whose
    artifact is unchanged (its stamp) is kept, not read again; one that cannot load leaves
    its teams on the last good copy, if any, else on ``routing.classifier``
    (logged). Blocking: call it in a thread."""
    loaded = loaded or {}
    out: dict[str, LoadedClassifier] = {}
    for path in sorted({t.classifier for t in config.teams if t.classifier}):
        stamp = artifact_stamp(path)
        if path in loaded and loaded[path][1] == stamp:
            out[path] = loaded[path]
            continue
        fallback = "its last good copy" if path in loaded else "routing.classifier"
        model = load_classifier(path, fallback=f"{fallback} for the teams that name it")
        if model is not None:
            out[path] = (model, stamp)
        elif path in loaded:
            out[path] = loaded[path]
    return out


async def start_classifiers(config: GatewayConfig, checked: Classifiers
                            ) -> tuple[ComplexityModel | None, dict[str, LoadedClassifier]]:
    """``routing.classifier`` and the teams' classifiers, those in ``checked``
    (just loaded by the config check) not read again."""
    path = config.routing.classifier
    classifier = (checked[path][0] if path is not None and path in checked else
                  await asyncio.to_thread(load_classifier, path))
    return classifier, await asyncio.to_thread(load_team_classifiers, config, checked)


async def refuse_evicting_redis(config: GatewayConfig, redis: RedisHandle) -> str | None:
    """The budget Redis's eviction risk (``budget/eviction.py``), or None; under
    ``fail_closed``, starting on it is refused unless the operator allowed it."""
    risk = await eviction_risk(redis.client)
    if (risk is not None and config.budget.fail_policy == "fail_closed"
            and not config.budget.allow_evicting_redis):
        await redis.close()
        logger.error("refusing to start: %s", risk)
        raise RuntimeError(f"refusing to start: {risk}")
    return risk


@dataclass(frozen=True, slots=True)
class Switches:
    """The settings every request reads, read out of the config once: a config
    section's attribute costs several times a plain one's on the chat path. A
    reload changes only the teams (``gateway/reload.py``), so these stay true."""

    budget: bool               # budget.enabled
    log_prompts: bool          # logging.prompts
    max_body_bytes: int
    max_body_objects: int
    deadline_s: float          # escalation.deadline_s
    checking: Checking         # escalation's answer checks
    fallback: bool             # routing.fallback

    @classmethod
    def of(cls, config: GatewayConfig) -> Switches:
        return cls(config.budget.enabled, config.logging.prompts, config.max_body_bytes,
                   config.max_body_objects, config.escalation.deadline_s,
                   Checking.of(config.escalation), config.routing.fallback)


@dataclass
class AppState:
    config: GatewayConfig
    keyring: KeyRing
    backends: dict[str, Backend]
    breakers: dict[str, Breaker]
    router: Router
    telemetry: Telemetry
    classifier: ComplexityModel | None = None
    team_classifiers: dict[str, LoadedClassifier] = field(default_factory=dict)  # by path
    reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)   # one reload at a time
    redis: RedisHandle | None = None
    budget: BudgetStore = None  # type: ignore[assignment]  # set in start()
    batch: BatchService | None = None  # the Batch API (gateway/batch_runner.py)
    config_path: str | None = None
    replica_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    # Admission per model (scheduling/scheduler.py), on the backends' LiveStats.
    schedulers: dict[str, PoolScheduler] = field(default_factory=dict)
    tracer: Tracer = NOOP      # OpenTelemetry spans (gateway/observe/otel.py): NOOP unless otel.endpoint
    doors: dict[str, Door] = field(default_factory=dict)   # path -> protocol adapter
    labels: Recorder | None = None     # labels from the traffic (labelling/), None: learning.labels off
    shadows: Shadows = None  # type: ignore[assignment]  # set in __post_init__ (teams[].shadow)
    history: History | None = None     # per-minute figures for /ui (metrics.history_minutes)
    # Bulk data's own Redis (storage.redis_url): stored responses, batch file bytes.
    storage: RedisHandle | None = None
    eviction_risk: str | None = None   # the budget Redis may evict keys (budget/eviction.py)
    warm: WarmPrefixes = None  # type: ignore[assignment]  # set in __post_init__
    response_cache: ResponseCache = None  # type: ignore[assignment]  # set in start()
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _team_names: tuple[Any, frozenset[str]] = (None, frozenset())

    def __post_init__(self) -> None:
        # Each model as the request path reads it (core.model_config.ModelFacts): the
        # router's, so that one object stands for one model.
        self.models: dict[str, ModelFacts] = self.router.facts
        self.switches = Switches.of(self.config)
        # What a request may cost per model: prices, output caps, learned prompt counts.
        self.tariff = Tariff(self.config)
        self.shadows = Shadows(self)
        # Which model probably holds a conversation's prefix (gateway/pipeline/warm.py).
        self.warm = WarmPrefixes(self.config.routing.warm_prefix_ttl_s)

    @classmethod
    async def start(cls, config: GatewayConfig, config_path: str | None = None,
                    checked: Classifiers | None = None) -> AppState:
        """``checked``: classifiers the config check has just loaded, not read again
        (a team's, only while its artifact's stamp is unchanged)."""
        tracer = start_tracer(config.otel)  # first: a missing SDK stops us before anything opens
        backends = build_backends(config)
        breakers = {m.name: Breaker(config.breaker) for m in config.models}
        classifier, team_classifiers = await start_classifiers(config, checked or {})
        router = Router(config, backends, classifier, breakers,
                        {path: model for path, (model, _) in team_classifiers.items()})
        # Load tiktoken's files now, not on the first request (about 0.5 s each).
        await asyncio.to_thread(lambda: [counter_for(enc) for enc in router.encodings])
        data_dir = Path(config.data_dir)
        redis = await open_redis(config.effective_redis_url, data_dir)
        risk = await refuse_evicting_redis(config, redis)
        schedulers = build_schedulers(config, {name: b.stats for name, b in backends.items()})
        state = cls(config=config, keyring=KeyRing.from_config(config), breakers=breakers,
                    schedulers=schedulers,
                    backends=backends, router=router, telemetry=Telemetry.start(config),
                    classifier=classifier, team_classifiers=team_classifiers,
                    redis=redis, config_path=config_path,
                    tracer=tracer, eviction_risk=risk)
        if config.storage.effective_redis_url:
            state.storage = await open_redis(config.storage.effective_redis_url, data_dir)
        state.budget = BudgetStore(redis.client, config.budget, replica_id=state.replica_id,
                                   data_dir=data_dir, scripts_client=redis.scripts)
        state.spawn(state.budget.run_reconciler())
        state.spawn(state.budget.leases.run())
        state._start_fleet(redis)
        if config.learning.labels:
            state.labels = Recorder(LabelStore(redis.client, config.budget.key_prefix,
                                               config.learning), config.learning,
                                    running_after_s=config.escalation.deadline_s)
            state.spawn(state.labels.run())
        state._start_history(redis)
        tags = KeySpace(config.budget.key_prefix, config.budget.timezone)
        state.response_cache = ResponseCache(QuotaStore(state.bulk.client, tags.tag, "rcache"))
        state.batch = await open_batch_service(state)
        state.doors = build_doors(state)
        # Open a few pooled connections now rather than in the first burst.
        await asyncio.gather(*(state.budget.ping() for _ in range(8)), return_exceptions=True)
        # Everything loaded so far (tokenizer tables, the classifier, config) lives as
        # long as the process: keep it out of the collector's full passes, which
        # otherwise walk it every few thousand requests and stall the event loop.
        gc.freeze()
        # Each request allocates a few hundred short-lived objects: collect the
        # young generation every 50,000 allocations rather than 700.
        gc.set_threshold(50_000, 20, 100)
        return state

    def _start_fleet(self, redis: RedisHandle) -> None:
        """What the replicas share of the fleet they serve."""
        config, prefix = self.config, self.config.budget.key_prefix
        # The gateway replicas split each model's max_concurrency among themselves.
        self.spawn(FleetShare(redis.client, prefix, self.replica_id, self.schedulers).run())
        share_backlogs(self.schedulers, redis.client, prefix)   # on-time admission
        # The upstreams' own load figures, where they publish them.
        for poller in start_pollers(config.models,
                                    {n: b.stats for n, b in self.backends.items()}):
            self.spawn(poller)
        if config.routing.cache_aware:
            tags = KeySpace(prefix, config.budget.timezone)
            self.spawn(self.warm.run(redis.client, tags.tag, self.team_names,
                                     f"{prefix}:warm", subscribers(redis),
                                     self.replica_id))
        # Breakers and upstream rests are the fleet's, not each process's.
        if config.breaker.shared:
            self.spawn(FleetHealth(redis.client, prefix, self.replica_id, self.breakers).run())

    def _start_history(self, redis: RedisHandle) -> None:
        """The per-minute figures /ui charts (gateway/observe/history.py)."""
        metrics, keep = self.telemetry.metrics, self.config.metrics.history_minutes
        if metrics is not None and keep:
            self.history = History(redis.client, self.config.budget.key_prefix,
                                   self.replica_id, metrics, self, keep)
            self.spawn(self.history.run())

    @property
    def bulk(self) -> RedisHandle:
        """Where bulk data lives: ``storage.redis_url``'s Redis, else the budget's."""
        handle = self.storage or self.redis
        assert handle is not None
        return handle

    def team_names(self) -> frozenset[str]:
        """The teams served now (a config reload replaces ``config``): computed once per
        config."""
        config = self.config
        if self._team_names[0] is not config:
            self._team_names = (config, frozenset(t.name for t in config.teams))
        return self._team_names[1]

    def spawn(self, coro: Any) -> None:
        """A background task that lives as long as the app."""
        self._tasks.append(asyncio.create_task(coro))

    async def aclose(self) -> None:
        if self.batch is not None:  # first: its lines still use the budget and backends
            await self.batch.aclose()
        await self.shadows.aclose()     # after the lines: they may start shadows
        if self.budget is not None:
            await self.budget.aclose()
        for task in self._tasks:
            task.cancel()
        if self.labels is not None:       # what the last requests left, before Redis closes
            await self.labels.flush()
        if self.history is not None:
            with contextlib.suppress(Exception):
                await self.history.flush()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for backend in self.backends.values():
            await backend.aclose()
        self.telemetry.close()
        await self.tracer.aclose()
        if self.storage is not None:
            await self.storage.close()
        if self.redis is not None:
            await self.redis.close()

    def soft_limited(self, caller: Caller) -> bool:
        """From the last budget reply this replica saw: no extra round trip."""
        return self.budget.soft_limited(caller.team_name, caller.key_id)

    async def redis_ready(self) -> bool:
        return bool(await self.budget.ping())
