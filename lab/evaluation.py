"""Routing quality of a complexity model on labelled prompts (``routegate eval``).

    report = evaluate(model, rows, prices)
    print(format_report(report))

Definitions (dataset README; RouteLLM):

- cost of a choice = the chosen model's price in $/Mtok, averaged over prompts.
- router at target t: the gateway's cost_quality rule, per prompt: the
  cheapest model whose predicted P(correct) >= t (ties: higher predicted P);
  if none, the best value (``policies/selection.py``).
- oracle: per prompt, the cheapest model with a perfect score, else the
  cheapest model (nothing helps). This is the "0.724 at $0.17" of issue #3.
- APGR for a (strong, weak) pair: rank prompts by predicted gain
  P(strong) - P(weak), send the top k to strong; PGR(k) = (quality(k) - weak)
  / (strong - weak); APGR is the mean PGR over k = 0..n. CPT(50%) is the
  smallest share of strong calls with PGR >= 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from classifiers.complexity import ComplexityModel
from lab.dataset import Row
from policies.selection import DEFAULT_KAPPA, select

TARGETS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9)


@dataclass
class Report:
    models: list[str]
    single: dict[str, tuple[float, float]]  # model -> (score, cost)
    oracle: tuple[float, float]
    router: dict[float, tuple[float, float]]  # target -> (score, cost)
    strong: str
    weak: str
    apgr: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (APGR, CPT50)


def predict_matrix(model: ComplexityModel, rows: Sequence[Row], models: Sequence[str]):
    """Predicted P(correct), shape (prompts, models); models are ``source/name`` keys."""
    out = np.zeros((len(rows), len(models)))
    abilities = []
    for m in models:
        ability = model.ability_of(m)
        if ability is None:
            raise KeyError(f"model {m!r} is not in the artifact")
        abilities.append(ability)
    families = [m.split("/", 1)[1] for m in models]
    for i, row in enumerate(rows):
        score = model.score(row.prompt)
        for j, (ability, family) in enumerate(zip(abilities, families, strict=True)):
            out[i, j] = model.p_correct(score, ability, family)
    return out


def route(pred: np.ndarray, prices: np.ndarray, target: float,
          kappa: float = DEFAULT_KAPPA) -> np.ndarray:
    """Index of the chosen model per prompt: the gateway's own rule
    (``policies.selection.select``; ties go to the higher predicted P)."""
    cost = prices.tolist()
    return np.asarray([select(p.tolist(), cost, target, kappa=kappa)[0] for p in pred])


def oracle_choice(scores: np.ndarray, prices: np.ndarray) -> np.ndarray:
    order = np.argsort(prices, kind="stable")
    choice = np.full(scores.shape[0], order[0])
    for i, s in enumerate(scores):
        perfect = order[s[order] >= 1.0]
        if perfect.size:
            choice[i] = perfect[0]
    return choice


def pgr_curve(ranking: np.ndarray, strong: np.ndarray, weak: np.ndarray) -> np.ndarray:
    """PGR after sending the first k prompts of ``ranking`` to strong, k = 0..n."""
    gain = np.concatenate([[0.0], np.cumsum((strong - weak)[ranking])])
    quality = (weak.sum() + gain) / len(strong)
    return (quality - weak.mean()) / (strong.mean() - weak.mean())


def gap_is_clear(strong: np.ndarray, weak: np.ndarray) -> bool:
    """Whether the strong model's lead on these prompts is above zero beyond its noise
    (the lower end of its normal 95% interval): APGR divides by that lead, and on a
    lead near zero or below it any ranking scores anything, the worst the best."""
    gains = np.asarray(strong, float) - np.asarray(weak, float)
    if gains.size < 2:
        return False
    return float(gains.mean() - 1.96 * gains.std(ddof=1) / np.sqrt(gains.size)) > 0


def apgr_cpt(ranking: np.ndarray, strong: np.ndarray, weak: np.ndarray) -> tuple[float, float]:
    curve = pgr_curve(ranking, strong, weak)
    reached = np.flatnonzero(curve >= 0.5)
    cpt = reached[0] / len(strong) if reached.size else 1.0
    return float(curve.mean()), float(cpt)


def evaluate(model: ComplexityModel, rows: Sequence[Row], prices: dict[str, float],
             strong: str, weak: str, pred: np.ndarray | None = None) -> Report:
    names = sorted(prices)
    price = np.asarray([prices[m] for m in names])
    scores = np.asarray([[row.scores[m] for m in names] for row in rows])
    if pred is None:
        pred = predict_matrix(model, rows, names)
    n = np.arange(len(rows))

    def outcome(choice: np.ndarray) -> tuple[float, float]:
        return float(scores[n, choice].mean()), float(price[choice].mean())

    report = Report(
        models=names,
        single={m: (float(scores[:, j].mean()), float(price[j])) for j, m in enumerate(names)},
        oracle=outcome(oracle_choice(scores, price)),
        router={t: outcome(route(pred, price, t)) for t in TARGETS},
        strong=strong,
        weak=weak,
    )
    s, w = names.index(strong), names.index(weak)
    gain = pred[:, s] - pred[:, w]
    lengths = np.asarray([len(row.prompt) for row in rows])
    # Stable sorts on negated keys: ties keep file order, so results are reproducible.
    report.apgr["router"] = apgr_cpt(np.argsort(-gain, kind="stable"), scores[:, s], scores[:, w])
    report.apgr["length"] = apgr_cpt(np.argsort(-lengths, kind="stable"), scores[:, s],
                                     scores[:, w])
    report.apgr["random"] = (0.5, 0.5)
    return report


def format_report(report: Report) -> str:
    short = {m: m.split("/", 1)[1] for m in report.models}
    lines = [f"{'policy':<40} {'score':>7} {'$/Mtok':>8}", "-" * 57]
    for m in report.models:
        score, cost = report.single[m]
        lines.append(f"{'single ' + short[m]:<40} {score:7.3f} {cost:8.3f}")
    best = max(report.models, key=lambda m: report.single[m][0])
    lines.append(f"{'best single (' + short[best] + ')':<40} {report.single[best][0]:7.3f} "
                 f"{report.single[best][1]:8.3f}")
    lines.append(f"{'oracle':<40} {report.oracle[0]:7.3f} {report.oracle[1]:8.3f}")
    for target, (score, cost) in report.router.items():
        lines.append(f"{f'router target={target:.2f}':<40} {score:7.3f} {cost:8.3f}")
    lines += ["", f"strong = {short[report.strong]}, weak = {short[report.weak]}",
              f"{'ranking':<40} {'APGR':>7} {'CPT(50%)':>8}", "-" * 57]
    for name, (apgr, cpt) in report.apgr.items():
        lines.append(f"{name:<40} {apgr:7.3f} {cpt:8.3f}")
    return "\n".join(lines)
