"""Does a reading encoder rank prompts no model trained on? ``python -m lab.encoder_table``.

    python -m lab.encoder_table --held-out arena_chat.jsonl \\
        --pair gpt-4-1106-preview,Mixtral-8x7B-Instruct-v0.1      # about 5 min here

Issue 22 asks whether a reading encoder pays out of domain, without labels
from the target traffic, and in which of three forms (the full encoder off
the event loop, a static distillation, or only in ``learn``). This measures
the quality half; ``python -m loadtest.bench_classifier --encoder`` the cost.

A ridge head on each embedding, all-MiniLM-L6-v2 (cut to 128 word pieces)
and its static distillation (``lab/static_encoder.py``), is fitted to
a seeded sample of the shared training prompts' mean failure rate (1 − the
mean score over the source's models; the penalty by 3-fold CV within the
sample). Then:

- the held-out file's prompts (routing-format JSONL, for example the chat
  prompts ``python -m lab.arena`` writes) are ranked by each head,
  per pair, next to the shipped classifier's ``difficulty``, prompt length
  and random, as ``routegate eval --held-out`` ranks them;
- each task of the sample is left out in turn and the heads refitted
  without it (the same penalty), then scored on it per source as the
  out-of-domain table of ``lab/outofdomain.py`` is, next to prompt
  length; the mean is over the (source, task) rows with a real gap.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from classifiers.complexity import ComplexityModel
from lab.dataset import TRAIN_FILES, Row, default_data_dir, load_rows
from lab.held_out import format_held_out, held_out_results, parse_pairs, read_held_out
from lab.outofdomain import Ranker, format_table, group_of, score_held_out, source_pairs

ALPHAS = (1.0, 3.0, 10.0, 30.0, 100.0)
FULL_PIECES = 128
BATCH = 16

Embed = Callable[[list[str]], np.ndarray]


def embedders() -> dict[str, Embed]:
    from lab.encoder import load_encoder
    from lab.static_encoder import StaticEncoder

    encoder = load_encoder()
    static = StaticEncoder(encoder)

    def full(texts: list[str]) -> np.ndarray:
        return np.vstack([encoder.embed(texts[i:i + BATCH], max_tokens=FULL_PIECES)
                          for i in range(0, len(texts), BATCH)])

    return {"MiniLM": full, "static": static.embed}


def failure_rate(rows: Sequence[Row]) -> np.ndarray:
    return np.asarray([1.0 - float(np.mean(list(r.scores.values()))) for r in rows])


def choose_alpha(x: np.ndarray, y: np.ndarray) -> float:
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import cross_val_score

    return max(ALPHAS, key=lambda a: cross_val_score(Ridge(alpha=a), x, y, cv=3).mean())


def head(x: np.ndarray, y: np.ndarray, alpha: float) -> Callable[[np.ndarray], np.ndarray]:
    from sklearn.linear_model import Ridge

    return Ridge(alpha=alpha).fit(x, y).predict


def leave_tasks_out(sample: Sequence[Row], emb: dict[str, np.ndarray], alphas: dict[str, float],
                    pairs: dict[str, tuple[str, str]]) -> str:
    """The out-of-domain table of the heads: each task left out of their fit in turn."""
    y = failure_rate(sample)
    groups = np.asarray([group_of(r, "task") for r in sample])
    results = []
    for group in np.unique(groups):
        train, held = groups != group, [int(i) for i in np.flatnonzero(groups == group)]
        index = {sample[i].prompt: j for j, i in enumerate(held)}
        rankers: dict[str, Ranker] = {}
        for name, x in emb.items():
            predicted = head(x[train], y[train], alphas[name])(x[held])

            def ranker(prompts: Sequence[str], strong: str, weak: str,
                       v: np.ndarray = predicted, at: dict[str, int] = index) -> np.ndarray:
                return v[[at[p] for p in prompts]]

            rankers[name] = ranker
        results += score_held_out(f"task {group}", [sample[i] for i in held], rankers, pairs)
    return format_table(results)


def run(held_out: Path, pair_names: Sequence[str], n_sample: int, seed: int) -> str:
    rows = load_rows(default_data_dir(), TRAIN_FILES)
    order = np.random.default_rng(seed).permutation(len(rows))[:n_sample]
    sample = [rows[i] for i in sorted(order)]
    held = read_held_out(held_out)
    pairs = parse_pairs(held, pair_names)
    y = failure_rate(sample)
    emb, alphas, rankings = {}, {}, {}
    for name, embed in embedders().items():
        emb[name] = embed([r.prompt for r in sample])
        alphas[name] = choose_alpha(emb[name], y)
        rankings[f"{name} head"] = head(emb[name], y, alphas[name])(
            embed([r.prompt for r in held]))
    shipped = {"shipped": ComplexityModel.load()}
    table = held_out_results(held, pairs, shipped, rankings)
    return "\n".join([
        f"heads fitted on {len(sample)} training prompts (seed {seed}); penalties "
        + ", ".join(f"{k} {v:g}" for k, v in alphas.items()), "",
        format_held_out(table, f"{held_out.name}, {len(held)} prompts"), "",
        "each task of the sample left out of the heads' fit in turn:",
        leave_tasks_out(sample, emb, alphas, source_pairs(rows))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held-out", type=Path, required=True)
    parser.add_argument("--pair", action="append", required=True, metavar="STRONG,WEAK")
    parser.add_argument("--sample", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        print(run(args.held_out, args.pair, args.sample, args.seed))
    except (OSError, ValueError) as exc:
        print(f"lab.encoder_table: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
