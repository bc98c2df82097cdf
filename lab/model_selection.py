"""Model selection on the training data only: seeded prompt hold-outs of llmrouter_train.

    python -m lab.model_selection --seeds 7 11 23            # the table in PROVENANCE.md
    python -m lab.model_selection --set ridge_alpha=10 --kappa 0.1
    python -m lab.model_selection --out-of-domain task source   # leave one task / source out
    python -m lab.model_selection --seeds 7 --set semantic_alpha=300   # + wordllama features
    python -m lab.model_selection --learned-weights 1 0.5 0.25     # d(x) with each weight

For each seed, 20% of the ``llmrouter_train.jsonl`` prompts are held out, the
artifact is trained on everything else (all other training files included)
and routed on the hold-out exactly as ``routegate eval`` routes the test set.
``llmrouter_test.jsonl`` is never read here: choices are made on these
numbers, the test set only reports the chosen configuration.

Printed per seed and as a mean: log loss of P(correct) over (prompt, priced
model) pairs; APGR of the router; ``bar``, the best router score at <= 40% of
the best single model's cost minus that model's score (issue #3, >= 0 is met);
and ``frontier``, the same margin at cost budgets of 20/25/30/40% averaged,
with targets every 0.01 from 0.30 to 0.95 (smoother than the nine targets).

``--out-of-domain`` runs the leave-one-task-out and leave-one-source-out
tables of ``lab/outofdomain.py`` instead (APGR of the difficulty
ranking on each held-out task, next to prompt length and random).

``--learned-weights`` scores each trained artifact again with each of these
``learned_weight`` values (how far the learned logit may pull d(x) from the
prior, an inference-time setting: one training serves them all). The
hold-outs then also print, per weight, the within-task ranking of
``difficulty`` against a model that answers everything
(``outofdomain.versus_perfect``, mean over the held-out tasks).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from collections.abc import Sequence

import numpy as np

from classifiers.complexity import ComplexityModel
from lab.build import build_artifact
from lab.dataset import (
    PRICED_SOURCE,
    TRAIN_FILES,
    Row,
    default_data_dir,
    load_prices,
    load_rows,
)
from lab.evaluation import TARGETS, evaluate, predict_matrix, route
from lab.outofdomain import Ranker, format_table, out_of_domain, versus_perfect
from lab.training import TrainConfig

HOLDOUT_SHARE = 0.2
DENSE_TARGETS = np.round(np.arange(0.30, 0.951, 0.01), 2)
BUDGETS = (0.2, 0.25, 0.3, 0.4)  # shares of the best single model's price


def split_rows(rows: Sequence[Row], seed: int) -> tuple[list[Row], list[Row]]:
    """(training rows, held-out priced rows): a seeded 20% of the priced source's prompts."""
    priced = [i for i, row in enumerate(rows) if row.source == PRICED_SOURCE]
    held = set(random.Random(seed).sample(priced, int(HOLDOUT_SHARE * len(priced))))
    return ([row for i, row in enumerate(rows) if i not in held],
            [row for i, row in enumerate(rows) if i in held])


def holdout_metrics(pred: np.ndarray, rows: Sequence[Row], train: Sequence[Row],
                    prices: dict[str, float], kappa: float) -> dict[str, float]:
    names = sorted(prices)
    price = np.asarray([prices[m] for m in names])
    scores = np.asarray([[row.scores[m] for m in names] for row in rows])
    train_mean = np.mean([[row.scores[m] for m in names] for row in train
                          if row.source == PRICED_SOURCE], axis=0)
    strong, weak = names[int(np.argmax(train_mean))], names[int(np.argmin(price))]
    report = evaluate(None, rows, prices, strong, weak, pred=pred)  # type: ignore[arg-type]
    best = int(np.argmax(scores.mean(axis=0)))
    best_score, best_cost = float(scores[:, best].mean()), float(price[best])
    n = np.arange(len(rows))

    def outcomes(targets) -> list[tuple[float, float]]:  # (cost, score) per target
        choices = [route(pred, price, float(t), kappa) for t in targets]
        return [(float(price[c].mean()), float(scores[n, c].mean())) for c in choices]

    curve = outcomes(DENSE_TARGETS)
    margin = [max([s for c, s in curve if c <= b * best_cost] or [0.0]) - best_score
              for b in BUDGETS]
    bar = [s for c, s in outcomes(TARGETS) if c <= 0.4 * best_cost]
    p = np.clip(pred, 1e-6, 1 - 1e-6)
    return {
        "log_loss": float(-(scores * np.log(p) + (1 - scores) * np.log(1 - p)).mean()),
        "apgr": report.apgr["router"][0],
        "bar": max(bar) - best_score if bar else -1.0,
        "frontier": float(np.mean(margin)),
    }


def within_tasks(model: ComplexityModel, rows: Sequence[Row]) -> float:
    """Mean over the rows' tasks of ``versus_perfect`` for the model's ``difficulty``."""
    values = []
    for task in sorted({row.task for row in rows}):
        mine = [row for row in rows if row.task == task]
        values.append(versus_perfect(np.asarray([model.score(r.prompt).difficulty for r in mine]),
                                     mine))
    return float(np.nanmean(values))


def variants(arrays: dict, meta: dict, weights: Sequence[float]) -> dict[str, ComplexityModel]:
    """The artifact as trained (label ""), and with each other ``learned_weight``."""
    models = {"": ComplexityModel(arrays, meta)}
    for weight in weights:
        models[f"@{weight:g}"] = ComplexityModel(arrays, {**meta, "learned_weight": weight})
    return models


def run_holdouts(cfg: TrainConfig, seeds: Sequence[int], kappa: float,
                 weights: Sequence[float] = ()) -> list[dict[str, float]]:
    data_dir = default_data_dir()
    rows, prices = load_rows(data_dir, TRAIN_FILES), load_prices(data_dir)
    results: dict[str, list[dict[str, float]]] = {}
    for seed in seeds:
        train, held = split_rows(rows, seed)
        arrays, meta = build_artifact(train, cfg, 0)
        for label, model in variants(arrays, meta, weights).items():
            pred = predict_matrix(model, held, sorted(prices))
            found = holdout_metrics(pred, held, train, prices, kappa)
            if weights:
                found["within"] = within_tasks(model, held)
            results.setdefault(label, []).append(found)
            print(f"seed {seed}{label}: " + "  ".join(f"{k} {v:.4f}" for k, v in found.items()))
    for label, per_seed in results.items():
        mean = {k: float(np.mean([r[k] for r in per_seed])) for k in per_seed[0]}
        print(f"mean{label}: " + "  ".join(f"{k} {v:.4f}" for k, v in mean.items()))
    return results[""]


def model_rankers(model: ComplexityModel) -> dict[str, Ranker]:
    """``difficulty`` (hardest first) and ``gain`` (P(strong) - P(weak)) of one artifact."""
    def difficulty(prompts: Sequence[str], strong: str, weak: str) -> np.ndarray:
        return np.asarray([model.score(p).difficulty for p in prompts])

    def gain(prompts: Sequence[str], strong: str, weak: str) -> np.ndarray | None:
        pair = [strong, weak]
        if any(model.ability_of(m) is None for m in pair):
            return None
        rows = [Row(p, "", "", {}) for p in prompts]
        pred = predict_matrix(model, rows, pair)
        return pred[:, 0] - pred[:, 1]

    return {"difficulty": difficulty, "gain": gain}


def artifact_rankers(cfg: TrainConfig, weights: Sequence[float] = ()):
    """``fit`` for ``out_of_domain``: train the artifact on the rows, rank with it (and
    with ``difficulty`` at each other learned weight)."""
    def fit(train: Sequence[Row]) -> dict[str, Ranker]:
        arrays, meta = build_artifact(train, cfg, 0)
        models = variants(arrays, meta, weights)
        rankers = model_rankers(models.pop(""))
        for label, model in models.items():
            rankers[f"difficulty{label}"] = model_rankers(model)["difficulty"]
        return rankers
    return fit


def run_out_of_domain(cfg: TrainConfig, groupings: Sequence[str], only: Sequence[str],
                      weights: Sequence[float] = ()) -> None:
    rows = load_rows(default_data_dir(), TRAIN_FILES)
    for by in groupings:
        results = out_of_domain(rows, artifact_rankers(cfg, weights), by=by, only=only)
        print(format_table(results), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.model_selection")
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 11, 23])
    parser.add_argument("--kappa", type=float, default=0.10)
    parser.add_argument("--out-of-domain", nargs="+", choices=("task", "source"), default=None,
                        help="leave-one-task-out / leave-one-source-out tables instead")
    parser.add_argument("--only", nargs="+", default=(), metavar="GROUP",
                        help="with --out-of-domain: hold out only these skills or sources")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a TrainConfig field, e.g. ridge_alpha=10")
    parser.add_argument("--learned-weights", nargs="+", type=float, default=(), metavar="W",
                        help="also score each artifact with these learned_weight values")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        name, value = item.split("=", 1)
        overrides[name] = type(getattr(TrainConfig(), name))(value)
    cfg = dataclasses.replace(TrainConfig(), **overrides)
    if args.out_of_domain:
        run_out_of_domain(cfg, args.out_of_domain, args.only, args.learned_weights)
    else:
        run_holdouts(cfg, args.seeds, args.kappa, args.learned_weights)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
