"""Latency of ``ComplexityModel.score()`` by prompt length (prints p50/p99).

    TIKTOKEN_CACHE_DIR=/work/shared/tiktoken python -m loadtest.bench_classifier [--artifact PATH]
    python -m loadtest.bench_classifier --encoder     # and the reading encoder's, and the choice
    python -m loadtest.bench_classifier --gap-ms 20   # each score after 20 ms idle
    python -m loadtest.bench_classifier --served      # inside routegate serve (the demo config)

A score repeated back to back runs with the classifier's tables in the CPU's
caches; on the request path it runs after other work or after idle, and costs
several times as much (``--gap-ms``). ``--served`` measures it where it runs:
the demo config's gateway, ``model: auto`` requests at ``--concurrency``, the
gateway's own ``routegate_classifier_seconds`` histogram read before and after
(its buckets bound the quantiles: "<= 1000" is between 750 and 1,000 µs).

Prompts are built from English words, a code snippet and digits so the n-gram
hashing, markers and skill classifier all do real work. Token counts are
measured with o200k_base when available.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from classifiers import kernel
from classifiers.complexity import ComplexityModel
from classifiers.length import counter_for

_WORDS = (
    "the model should explain why a list of 42 integers sorted with quicksort takes "
    "n log n time on average but quadratic time when the pivot is chosen badly ; "
    "def solve ( xs ) : return sorted ( xs ) [ : 3 ] x = 7 * y + 3 what is the answer ?"
).split()


def make_prompt(n_tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    counter = counter_for("o200k_base")
    words = [rng.choice(_WORDS) for _ in range(n_tokens)]
    text = " ".join(words)
    # Trim to roughly the requested token count.
    while counter.count_text(text) > n_tokens and len(words) > 1:
        words = words[: int(len(words) * 0.95)]
        text = " ".join(words)
    return text


def measure(model: ComplexityModel, prompts: list[str], repeats: int,
            gap_s: float = 0.0) -> tuple[float, float]:
    for text in prompts[:20]:
        model.score(text)  # warm caches
    times = []
    for _ in range(repeats):
        for text in prompts:
            if gap_s:
                time.sleep(gap_s)
            start = time.perf_counter()
            model.score(text)
            times.append(time.perf_counter() - start)
    times.sort()
    p50 = statistics.median(times)
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
    return p50 * 1e6, p99 * 1e6


ENCODER_PIECES = (16, 64, 128, 256)
BUDGET_MS = 1.0          # the classifier's p99 budget on the request path


def encoder_rows(prompts_of: dict[int, list[str]], repeats: int,
                 embed: Callable[[list[str], int], object]) -> list[tuple[int, float, float]]:
    """(word pieces, p50 ms, p99 ms) of one prompt through ``embed(texts, pieces)``."""
    rows = []
    for pieces, prompts in prompts_of.items():
        embed(prompts, pieces)              # warm: a static table computes its pieces here
        times = []
        for _ in range(max(1, repeats // 4)):
            for text in prompts:
                start = time.perf_counter()
                embed([text], pieces)
                times.append(time.perf_counter() - start)
        times.sort()
        rows.append((pieces, statistics.median(times) * 1e3,
                     times[min(len(times) - 1, int(0.99 * len(times)))] * 1e3))
    return rows


def print_encoder(repeats: int, classifier_p99_us: float) -> None:
    from lab.encoder import load_encoder
    from lab.static_encoder import StaticEncoder

    encoder = load_encoder()
    static = StaticEncoder(encoder)
    prompts_of = {n: [make_prompt(2 * n, seed) for seed in range(10)] for n in ENCODER_PIECES}
    full = encoder_rows(prompts_of, repeats, lambda t, n: encoder.embed(t, max_tokens=n))
    prompts_of[512] = [make_prompt(1024, seed) for seed in range(10)]
    distilled = encoder_rows(prompts_of, repeats * 4, lambda t, n: static.embed(t, max_pieces=n))
    print("\nreading encoder, one prompt cut to N word pieces: all-MiniLM-L6-v2 (numpy), "
          "and its static distillation (lab/static_encoder.py):")
    print(f"{'pieces':>8} {'p50 ms':>8} {'p99 ms':>8} {'static p50 ms':>14} {'p99 ms':>8}")
    for (pieces, p50, p99), (_, s50, s99) in zip([*full, (512, float("nan"), float("nan"))],
                                                 distilled, strict=True):
        print(f"{pieces:8d} {p50:8.1f} {p99:8.1f} {s50:14.3f} {s99:8.3f}")
    at_128 = next(p50 for pieces, p50, _ in full if pieces == 128)
    static_99 = max(p99 for _, _, p99 in distilled)
    where = ("off the request path (over the 1 ms budget)" if at_128 > BUDGET_MS
             else "within the request path's 1 ms budget")
    print(f"\nchoice: the full encoder {where}: at 128 pieces it costs {at_128:.1f} ms a prompt, "
          f"{at_128 * 1e3 / max(classifier_p99_us, 1):.0f}x the classifier's p99 on 2,000 "
          f"tokens. The static one costs at most {static_99:.2f} ms (p99) on top of the "
          "classifier, once its table is computed. Whether either pays in quality: "
          "python -m lab.encoder_table (out of domain) and routegate learn "
          "--labels FILE --compare-encoder (on a team's own labels).")


def histogram(text: str) -> dict[float, float]:
    """``routegate_classifier_seconds``' cumulative buckets (upper bound -> count)."""
    import re
    return {float(le): float(v) for le, v in re.findall(
        r'^routegate_classifier_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)}


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the bucket that holds the ``q`` quantile of what came between."""
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = counts[float("inf")]
    return next(le for le, n in counts.items() if n >= q * total)


def served(artifact: Path | None, requests: int, concurrency: int,
           lengths: tuple[int, ...] = (50, 500, 2000)) -> None:
    """The classifier's time inside ``routegate serve`` (the demo config), by prompt length."""
    import asyncio
    import uuid

    import httpx
    import yaml

    from loadtest.servers import REPO, run_gateway
    from loadtest.targets import wait_classifier

    config = yaml.safe_load((REPO / "config" / "routegate.yaml").read_text())
    config["redis_url"] = "redis://127.0.0.1:6379/0"
    config["budget"] = {**config.get("budget", {}), "key_prefix": f"rgbench-{uuid.uuid4().hex[:8]}"}
    if artifact is not None:
        config.setdefault("routing", {})["classifier"] = str(artifact.resolve())
    key = {"authorization": "Bearer sk-routegate-demo"}

    async def drive(url: str, prompts: list[str], count: int) -> None:
        left = list(range(count))
        async with httpx.AsyncClient(timeout=120) as client:
            async def worker() -> None:
                while left:
                    text = prompts[left.pop() % len(prompts)]
                    r = await client.post(url + "/v1/chat/completions", headers=key, json={
                        "model": "auto", "max_tokens": 1,
                        "messages": [{"role": "user", "content": text}]})
                    r.raise_for_status()
            await asyncio.gather(*(worker() for _ in range(concurrency)))

    with run_gateway(config) as gw:
        # The score it settles on (not numpy's while the compiled one builds), as it says.
        path = wait_classifier(gw.url)
        print(f"inside routegate serve (config/routegate.yaml, classifier "
              f"{artifact or config['routing'].get('classifier')}), {requests} auto requests per "
              f"length at concurrency {concurrency}, score {path}; bucket bounds in us:")
        print(f"{'prompt':<12} {'p50 <=':>8} {'p99 <=':>8} {'under 1 ms':>11}")
        for n in lengths:
            prompts = [make_prompt(n, seed) for seed in range(50)]
            asyncio.run(drive(gw.url, prompts, 20))            # warm
            before = histogram(httpx.get(gw.url + "/metrics").text)
            asyncio.run(drive(gw.url, prompts, requests))
            time.sleep(1.5)                                     # the metrics' batched flush
            after = histogram(httpx.get(gw.url + "/metrics").text)
            total = after[float("inf")] - before.get(float("inf"), 0.0)
            under = (after[0.001] - before.get(0.001, 0.0)) / total
            print(f"{n:>5} tokens {bucket_quantile(before, after, 0.5) * 1e6:8.0f} "
                  f"{bucket_quantile(before, after, 0.99) * 1e6:8.0f} {under:11.3f}")


def _path() -> str:
    """Which score runs here (and in a gateway started with this environment)."""
    if os.environ.get("ROUTEGATE_CLASSIFIER_KERNEL") == "numpy":
        return "numpy (ROUTEGATE_CLASSIFIER_KERNEL=numpy)"
    return "compiled (numba)" if kernel.available() else "numpy (numba not installed)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--encoder", action="store_true",
                        help="also the reading encoder's cost by length, and the choice")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="idle this long before each score (the request path's cold caches)")
    parser.add_argument("--served", action="store_true",
                        help="inside routegate serve (the demo config), from its histogram")
    parser.add_argument("--requests", type=int, default=400, help="--served: per length")
    parser.add_argument("--concurrency", type=int, default=4, help="--served")
    parser.add_argument("--lengths", type=int, nargs="+", default=[50, 500, 2000],
                        help="--served: prompt lengths in tokens (above about 4,000 the "
                             "gateway counts them off its event loop)")
    args = parser.parse_args()
    if args.served:
        served(args.artifact, args.requests, args.concurrency, tuple(args.lengths))
        return 0
    model = ComplexityModel.load(args.artifact)
    model.wait_compiled()
    counter = counter_for("o200k_base")
    cases = [(f"{n} tokens", [make_prompt(n, seed) for seed in range(50)]) for n in (50, 500, 2000)]
    big = make_prompt(2000, 99)
    cases.append(("200k chars", [(big * (200_000 // len(big) + 1))[:200_000]] * 50))
    cases.append(("1 MB", [(big * (1_000_000 // len(big) + 1))[:1_000_000]] * 10))
    print(f"score {_path()}")
    print(f"{'prompt':<12} {'tokens':>8} {'p50 us':>8} {'p99 us':>8}")
    p99_2000 = 0.0
    for name, prompts in cases:
        tokens = statistics.median(counter.count_text(p) for p in prompts[:5])
        p50, p99 = measure(model, prompts, args.repeats if not args.gap_ms
                           else max(1, args.repeats // 5), args.gap_ms / 1000)
        p99_2000 = p99 if name == "2000 tokens" else p99_2000
        print(f"{name:<12} {tokens:8.0f} {p50:8.0f} {p99:8.0f}")
    if args.encoder:
        print_encoder(args.repeats, p99_2000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
