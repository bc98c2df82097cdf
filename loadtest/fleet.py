"""The simulated fleet under test: its config, and a gateway process serving it.

    config = fleet_config("slo_aware", tmp)            # config/routegate.yaml, for a load test
    with gateway_process(config, tmp) as gw:
        gw.url, gw.keys, gw.cpu_seconds()

The demo fleet (small, medium, large; their prices, abilities and energy)
is kept as it is; what changes for a load test:
- each model generates exactly ``max_tokens`` tokens (``output_tokens_mean``
  far above any cap), so the trace's output lengths are what is served;
- ``FLEET_SCALE`` shrinks the fleet so that one Python client on a small
  machine can drive it past saturation without the gateway or the client
  becoming the bottleneck (checked by the run's CPU figures);
- two teams, one per pool, so the gateway's ledger splits cost by pool;
- a unique ``budget.key_prefix``, so runs sharing one Redis never mix books.

Policy names are data: ``POLICY_CHOICES`` maps each name the experiment
compares to the gateway policies (and config) that can play it, first
registered wins. The three routers of issue 10, each meeting or ignoring
what it is blind to:

- ``cheapest``: cheapest-first, the cost router this gateway replaces: the
  cheapest model that meets the request's quality target, blind to load
  (the gateway's ``quality`` policy). Both it and ``slo_aware`` answer every
  request at its quality target, so their costs per task compare. (The
  gateway's own ``cheapest`` policy ignores quality too: all on ``small``.)
- ``quality``: quality-only: the most capable model for every request,
  blind to cost and load (``fixed`` on the model with the highest ability).
- ``slo_aware``: the cheapest model meeting the quality target whose
  predicted TTFT and TPOT meet the SLO, and on-time admission
  (``scheduler.refuse_late``): what no model can start on time is refused at
  once instead of served late.
- ``cheapest_on_time``: cheapest-first with the same on-time admission: what
  the routing adds over admission alone.
- ``slo_aware_unbounded``: slo_aware without the demo's ``max_slo_premium``
  (2): it may spill to a model of any price to serve a request on time.
"""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loadtest.servers import free_port, hashed
from loadtest.targets import running, server

REPO = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO / "config" / "routegate.yaml"
KEYS = {"interactive": "sk-loadtest-interactive", "batch": "sk-loadtest-batch"}
EXACT_OUTPUT_MEAN = 10**9    # lognormal(mean 1e9) is never below a cap: output = max_tokens

# Per model, what differs from config/routegate.yaml's simulate section.
FLEET_SCALE: dict[str, dict[str, Any]] = {}

# name in the experiment -> (gateway policy, config overrides), first registered wins.
# An override's "scheduler" section goes to every model's.
_ON_TIME = {"scheduler": {"refuse_late": True}}
POLICY_CHOICES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "cheapest": [("quality", {})],
    "quality": [("fixed", {})],          # fixed_model: the most capable (fleet_config)
    "slo_aware": [("slo_aware", _ON_TIME), ("cost_quality", _ON_TIME)],
    "cheapest_on_time": [("quality", _ON_TIME)],
    # slo_aware without the demo's pools.interactive.max_slo_premium: it spills to
    # any model with room, whatever the price.
    "slo_aware_unbounded": [("slo_aware", {**_ON_TIME, "pools": {"interactive": {
        "max_slo_premium": None}}})],
}

def gateway_policy(name: str) -> tuple[str, dict[str, Any]]:
    """The gateway policy (and config overrides) that plays ``name`` in this checkout."""
    from policies import POLICIES

    for policy, overrides in POLICY_CHOICES.get(name, [(name, {})]):
        if policy in POLICIES:
            return policy, overrides
    raise ValueError(f"no registered policy plays {name!r}; registered: {sorted(POLICIES)}")


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def fleet_config(policy: str, data_dir: Path, *, scale: dict[str, dict[str, Any]] | None = None,
                 base: Path = DEMO_CONFIG, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The demo config, made ready for a load test run with ``policy``."""
    config = yaml.safe_load(base.read_text())
    # The shipped classifier, not the demo's own (demo_fleet.npz, selected on everyday
    # prompts): the load tests' prompts are word soup of set lengths, which that one
    # deems hard, so every request would go to large. Their figures are of scheduling,
    # SLOs and money, measured with the shipped routing mix.
    (config.get("routing") or {}).pop("classifier", None)
    scale = FLEET_SCALE if scale is None else scale
    for model in config["models"]:
        sim = model.setdefault("simulate", {})
        sim.update(scale.get(model["name"], {}), output_tokens_mean=EXACT_OUTPUT_MEAN)
    quality = config["teams"][0].get("quality", 0.8) if config.get("teams") else 0.8
    config["teams"] = [{"name": f"loadtest-{pool}", "keys": [hashed(key)], "quality": quality,
                        "allowed_pools": [pool]} for pool, key in KEYS.items()]
    name, overrides = gateway_policy(policy)
    overrides = dict(overrides)
    per_model = overrides.pop("scheduler", {})
    for model in config["models"]:
        model["scheduler"] = _merge(model.get("scheduler") or {}, per_model)
    config = _merge(config, overrides)
    routing = config.setdefault("routing", {})
    routing["auto_policy"] = name
    if name == "fixed" and not routing.get("fixed_model"):
        routing["fixed_model"] = max(config["models"], key=lambda m: m.get("ability", 0))["name"]
    config.setdefault("budget", {})["key_prefix"] = f"lt-{uuid.uuid4().hex[:10]}"
    config["data_dir"] = str(data_dir / "gateway-data")
    config["redis_url"] = None     # embedded, unless REDIS_URL is set (the gateway reads it)
    return _merge(config, extra or {})


@dataclass
class GatewayProcess:
    url: str
    proc: subprocess.Popen[bytes]
    config: dict[str, Any]
    keys: dict[str, str]

    def cpu_seconds(self) -> float:
        """user + system CPU of the gateway process so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def gateway_process(config: dict[str, Any], tmp: Path, *, log_level: str = "warning"
                    ) -> Iterator[GatewayProcess]:
    """``routegate serve`` with ``config`` on a free loopback port; stopped afterwards."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "routegate.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["gateway.cli", "serve", "--config", str(path), "--port", str(port),
            "--log-level", log_level]
    with running(args, url + "/healthz", tmp / "gateway.log", timeout=60, stop_s=15) as proc:
        yield GatewayProcess(url, proc, config, dict(KEYS))


def energy_table(config: dict[str, Any]) -> dict[str, float] | None:
    table = {m["name"]: m["energy_j_per_token"] for m in config.get("models", [])
             if m.get("energy_j_per_token") is not None}
    return table or None


def slo_of(base: Path = DEMO_CONFIG) -> tuple[float, float]:
    """(TTFT, TPOT) seconds of the interactive pool, as the client judges them: from
    the fleet's own config, never from a policy override that switched the SLO off."""
    inter = (yaml.safe_load(base.read_text()).get("pools") or {}).get("interactive") or {}
    return inter.get("ttft_ms", 450) / 1000, inter.get("tpot_ms", 40) / 1000


@contextlib.contextmanager
def standalone_fleet(config: dict[str, Any], tmp: Path, *, signals: bool = False,
                     interval_s: float = 1.0) -> Iterator[dict[str, Any]]:
    """``config`` with each chat model served by its own standalone simulator
    (``sim/server.py``, the model's physics), so that several gateway
    replicas share one fleet's queues. ``signals``: each model reads its
    simulator's vLLM-format /metrics (``load_metrics``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = copy.deepcopy(config)
    models = []
    with contextlib.ExitStack() as stack:
        for model in out["models"]:
            if model.get("kind") == "embedding":
                continue
            sim = model.pop("simulate")
            port = free_port()
            args = ["sim.server", "--port", str(port),
                    "--prefill", str(sim["prefill_tokens_per_s"]), "--tpot-ms", str(sim["tpot_ms"]),
                    "--batch-slowdown", str(sim.get("batch_slowdown", 0.04)),
                    "--max-batch", str(sim["max_batch"]),
                    "--output-mean", str(int(sim["output_tokens_mean"]))]
            if sim.get("kv_cache_tokens"):
                args += ["--kv-cache-tokens", str(sim["kv_cache_tokens"])]
            if sim.get("prefix_cache") is False:
                args.append("--no-prefix-cache")
            if sim.get("prefix_cache_tokens"):
                args += ["--prefix-cache-tokens", str(sim["prefix_cache_tokens"])]
            url = stack.enter_context(server(args, "/health", port, tmp / f"sim-{model['name']}.log"))
            model.update(backend="openai_compat", base_url=url + "/v1", upstream_model="default")
            # The gateway knows only what it is told and what it measures: the
            # upstream's batch size, not its physics.
            model["scheduler"] = {**(model.get("scheduler") or {}), "max_concurrency": sim["max_batch"]}
            if signals:
                model["load_metrics"] = {"format": "vllm", "interval_s": interval_s}
            models.append(model)
        out["models"] = models
        yield out
