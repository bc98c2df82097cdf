"""Out-of-domain check of the prior: does it place a task it never saw at the right level?

    python -m lab.prior_check [--data DIR]

The prior is what a prompt unlike the training data gets (``classifiers/prior.py``),
so what matters is how well it predicts the difficulty of a *new* task as a
whole. Each (source, task) of the training data is left out in turn, the prior
is fitted on the rest (on the shipped model's learned d(x) before shrinking,
as ``routegate train`` fits it), and the left-out task's mean prior is compared
with its mean learned d(x): RMSE and rank correlation over the tasks, for the
shape prior alone and with word rarity (``classifiers/rarity.py``) between tasks.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from classifiers.complexity import ComplexityModel
from classifiers.prior import fit_prior, prior_inputs
from classifiers.rarity import build_table
from lab.dataset import TRAIN_FILES, default_data_dir, load_rows


def task_levels(x: np.ndarray, learned: np.ndarray, groups: np.ndarray,
                between: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, actual) mean d(x) of each group, the prior fitted without it."""
    predicted, actual = [], []
    for group in np.unique(groups):
        held = groups == group
        coef, intercept = fit_prior(x[~held], learned[~held], groups[~held].tolist(), between)
        predicted.append(float(np.mean(x[held] @ coef + intercept)))
        actual.append(float(learned[held].mean()))
    return np.asarray(predicted), np.asarray(actual)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.prior_check")
    parser.add_argument("--data", type=Path, default=None, help="routing data directory")
    args = parser.parse_args(argv)
    rows = load_rows(args.data or default_data_dir(), TRAIN_FILES)
    model = ComplexityModel.load()
    table, _ = build_table()
    feats, shape, rarity = prior_inputs([row.prompt for row in rows], table)
    learned = np.asarray([model.raw_parts(f)[0] for f in feats])
    groups = np.asarray([f"{row.source}|{row.task}" for row in rows])
    n = shape.shape[1]
    designs: dict[str, tuple[np.ndarray, Sequence[int]]] = {"shape, within tasks": (shape, ()),
               "shape + word rarity, rarity between tasks": (np.hstack([shape, rarity]),
                                                             range(n, n + rarity.shape[1]))}
    print(f"leave one task out ({np.unique(groups).size} tasks): the left-out task's mean d(x)")
    print(f"{'prior':<44} {'RMSE':>6} {'Spearman':>9}")
    for name, (x, between) in designs.items():
        predicted, actual = task_levels(x, learned, groups, between)
        rmse = float(np.sqrt(np.mean((predicted - actual) ** 2)))
        print(f"{name:<44} {rmse:6.3f} {spearmanr(predicted, actual)[0]:9.3f}")
    print(f"{'(spread of the tasks: SD of their means)':<44} {float(np.std(actual)):6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
