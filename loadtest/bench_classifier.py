"""Latency of ``ComplexityModel.score()`` by prompt length (prints p50/p99).

    TIKTOKEN_CACHE_DIR=/work/shared/tiktoken python -m loadtest.bench_classifier [--artifact PATH]
    python -m loadtest.bench_classifier --encoder     # and the reading encoder's, and the choice

Prompts are built from English words, a code snippet and digits so the n-gram
hashing, markers and skill classifier all do real work. Token counts are
measured with o200k_base when available.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def measure(model: ComplexityModel, prompts: list[str], repeats: int) -> tuple[float, float]:
    for text in prompts[:20]:
        model.score(text)  # warm caches
    times = []
    for _ in range(repeats):
        for text in prompts:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--encoder", action="store_true",
                        help="also the reading encoder's cost by length, and the choice")
    args = parser.parse_args()
    model = ComplexityModel.load(args.artifact)
    counter = counter_for("o200k_base")
    cases = [(f"{n} tokens", [make_prompt(n, seed) for seed in range(50)]) for n in (50, 500, 2000)]
    big = make_prompt(2000, 99)
    cases.append(("200k chars", [(big * (200_000 // len(big) + 1))[:200_000]] * 50))
    cases.append(("1 MB", [(big * (1_000_000 // len(big) + 1))[:1_000_000]] * 10))
    print(f"{'prompt':<12} {'tokens':>8} {'p50 us':>8} {'p99 us':>8}")
    p99_2000 = 0.0
    for name, prompts in cases:
        tokens = statistics.median(counter.count_text(p) for p in prompts[:5])
        p50, p99 = measure(model, prompts, args.repeats)
        p99_2000 = p99 if name == "2000 tokens" else p99_2000
        print(f"{name:<12} {tokens:8.0f} {p50:8.0f} {p99:8.0f}")
    if args.encoder:
        print_encoder(args.repeats, p99_2000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
