"""Request traces: what to send and when, before anything is sent.

    trace = azure_trace("conv", rps=20, duration_s=30)       # real arrivals, scaled
    trace = mix_trace("rag", rps=5, duration_s=60, seed=1)   # Poisson arrivals, named mix
    trace = read_jsonl("my.jsonl")                           # {"t": 0.12, "prompt_tokens": ..}
    trace = ramp([5, 10, 20], step_s=10, make=lambda rps, s: azure_trace("conv", rps, s))

A trace is a list of ``TraceRequest`` sorted by arrival (seconds from the
start of the run). The Azure traces (Splitwise, ISCA 2024; CC-BY 4.0) are
read from ``../shared/datasets/traces/`` and never copied into the repo.
Scaling keeps their burstiness: a window of consecutive requests is
stretched or squeezed to the run's length, so a burst stays a burst at any load.
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from functools import cache
from pathlib import Path

TRACES_DIR = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "traces"
AZURE_FILES = {"conv": "azure_llm_2023_conv.csv", "code": "azure_llm_2023_code.csv"}
MAX_OUTPUT_TOKENS = 1024     # a trace's output length, capped: the tail is a few 1000-token rows
MAX_PROMPT_TOKENS = 16000


@dataclass(frozen=True, slots=True)
class TraceRequest:
    t: float                  # arrival, seconds from the start of the run
    prompt_tokens: int
    output_tokens: int        # sent as max_tokens; the simulator then generates exactly this
    pool: str = "interactive"
    kind: str = "chat"        # which mix (or trace) it came from, for the report
    passages: int = 0         # RAG: how many passages the prompt is cut into
    quality: float | None = None  # a per-request quality target (sent as model "auto:Q")


def _parse_time(text: str) -> float:
    # Seven fractional digits: more than datetime parses.
    head, _, frac = text.partition(".")
    base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


@cache
def load_azure(name: str, directory: Path = TRACES_DIR) -> tuple[TraceRequest, ...]:
    """One Azure trace as it is: arrivals from its first row, token counts capped."""
    path = directory / AZURE_FILES.get(name, name)
    with open(path, newline="") as f:
        rows = [(_parse_time(r["TIMESTAMP"]), int(r["ContextTokens"]), int(r["GeneratedTokens"]))
                for r in csv.DictReader(f)]
    rows.sort()
    t0 = rows[0][0]
    return tuple(TraceRequest(t - t0, max(1, min(p, MAX_PROMPT_TOKENS)),
                              max(1, min(g, MAX_OUTPUT_TOKENS)), kind=name)
                 for t, p, g in rows)


def scale(rows: Iterable[TraceRequest], rps: float, duration_s: float, *,
          offset: int = 0, max_output: int = MAX_OUTPUT_TOKENS) -> list[TraceRequest]:
    """``rps * duration_s`` consecutive rows from ``offset`` on (wrapping around),
    their arrivals stretched or compressed so that they fill the window: the
    offered load is exactly ``rps`` and the trace's burstiness within it is kept."""
    rows = list(rows)
    n = round(rps * duration_s)
    if n <= 0 or len(rows) < 2:
        return []
    span = rows[-1].t - rows[0].t
    picked, t, prev = [], 0.0, None
    for k in range(n + 1):     # one past the window: its arrival marks the window's end
        row = rows[(offset + k) % len(rows)]
        if prev is not None:   # wrapping around adds one mean gap
            t += row.t - prev.t if row.t >= prev.t else span / len(rows)
        picked.append((t, row))
        prev = row
    factor = duration_s / picked[-1][0] if picked[-1][0] > 0 else 0.0
    return [replace(row, t=at * factor, output_tokens=min(row.output_tokens, max_output))
            for at, row in picked[:-1]]


def azure_trace(name: str, rps: float, duration_s: float, *, offset: int = 0,
                max_output: int = MAX_OUTPUT_TOKENS) -> list[TraceRequest]:
    return scale(load_azure(name), rps, duration_s, offset=offset, max_output=max_output)


# Named mixes: (prompt tokens, output tokens, passages) drawn per request.
def _chat(rng: random.Random) -> tuple[int, int, int]:
    return int(rng.lognormvariate(math.log(150), 0.6)), int(rng.lognormvariate(math.log(120), 0.5)), 0


def _rag(rng: random.Random) -> tuple[int, int, int]:
    passages = rng.randint(5, 20)
    return 100 + passages * rng.randint(150, 400), int(rng.lognormvariate(math.log(200), 0.4)), passages


def _agent(rng: random.Random) -> tuple[int, int, int]:
    # Agent steps: a growing transcript plus tool results, short structured outputs.
    return rng.randint(1500, 6000), rng.randint(20, 120), 0


def _long_output(rng: random.Random) -> tuple[int, int, int]:
    return int(rng.lognormvariate(math.log(300), 0.5)), rng.randint(600, MAX_OUTPUT_TOKENS), 0


MIXES: dict[str, Callable[[random.Random], tuple[int, int, int]]] = {
    "chat": _chat, "rag": _rag, "agent": _agent, "long_output": _long_output,
}


def mix_trace(mix: str, rps: float, duration_s: float, *, seed: int = 0,
              pool: str = "interactive") -> list[TraceRequest]:
    """Poisson arrivals at ``rps`` for ``duration_s``, each request drawn from ``mix``
    (a name in ``MIXES``, or ``"chat:0.5,rag:0.3,agent:0.2"``)."""
    weights = _mix_weights(mix)
    rng = random.Random(seed)
    names, shares = list(weights), list(weights.values())
    out: list[TraceRequest] = []
    now = rng.expovariate(rps) if rps > 0 else duration_s
    while now < duration_s:
        kind = rng.choices(names, shares)[0]
        prompt, output, passages = MIXES[kind](rng)
        out.append(TraceRequest(now, max(1, min(prompt, MAX_PROMPT_TOKENS)),
                                max(1, min(output, MAX_OUTPUT_TOKENS)), pool, kind, passages))
        now += rng.expovariate(rps)
    return out


def _mix_weights(mix: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for part in mix.split(","):
        name, _, share = part.partition(":")
        if name.strip() not in MIXES:
            raise ValueError(f"unknown mix {name!r}; known: {sorted(MIXES)}")
        weights[name.strip()] = float(share) if share else 1.0
    return weights


def ramp(steps: list[float], step_s: float,
         make: Callable[[float, float], list[TraceRequest]]) -> list[TraceRequest]:
    """Consecutive steps of rising load (a ramp to saturation), one trace."""
    out: list[TraceRequest] = []
    for i, rps in enumerate(steps):
        out.extend(replace(r, t=r.t + i * step_s) for r in make(rps, step_s))
    return out


def merge(*traces: list[TraceRequest]) -> list[TraceRequest]:
    return sorted((r for trace in traces for r in trace), key=lambda r: r.t)


def with_pool(trace: list[TraceRequest], pool: str) -> list[TraceRequest]:
    return [replace(r, pool=pool) for r in trace]


def with_quality(trace: list[TraceRequest], shares: dict[float, float], *, seed: int = 0
                 ) -> list[TraceRequest]:
    """Each request asks for a quality target drawn from ``shares`` (target -> weight):
    the traces carry no prompt text, so how hard a request is has to be said."""
    rng = random.Random(seed)
    targets, weights = list(shares), list(shares.values())
    return [replace(r, quality=rng.choices(targets, weights)[0]) for r in trace]


def read_jsonl(path: str | Path) -> list[TraceRequest]:
    """One request per line: ``t`` (s), ``prompt_tokens``, ``output_tokens``,
    optional ``pool``, ``kind``, ``passages``, ``quality``."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(TraceRequest(**json.loads(line)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: {exc}") from None
    return sorted(out, key=lambda r: r.t)


def write_jsonl(trace: list[TraceRequest], path: str | Path) -> None:
    Path(path).write_text("".join(json.dumps(asdict(r)) + "\n" for r in trace))
