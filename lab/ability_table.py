"""What each model of the shared routing data scores on average: a guide to ``ability``.

    python -m lab.ability_table              # mean score per model, per training file

A model's ``ability`` is P(correct) on a prompt of average difficulty
(docs/routing.md); its mean score over a broad label set is a fair first
value, until ``routegate calibrate`` fits one from the model's own labels.
docs/configuration.md's table of sensible values by model size comes from
this print-out.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from lab.dataset import TRAIN_FILES, default_data_dir, load_rows


def mean_scores(data_dir: Path, name: str) -> list[tuple[str, float, int]]:
    """(model, mean score, prompts) of one file, best first."""
    scores: dict[str, list[float]] = defaultdict(list)
    for row in load_rows(data_dir, [name]):
        for model, score in row.scores.items():
            scores[model].append(score)
    table = [(m, sum(v) / len(v), len(v)) for m, v in scores.items()]
    return sorted(table, key=lambda t: -t[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="routing data directory")
    args = parser.parse_args(argv)
    data_dir = args.data or default_data_dir()
    for name in TRAIN_FILES:
        print(name)
        for model, mean, n in mean_scores(data_dir, name):
            print(f"  {model.split('/')[-1]:38s} {mean:.2f}  ({n} prompts)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
