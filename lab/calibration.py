"""Fit one model's ``ability`` from a few hundred labelled prompts.

    examples = read_examples("labelled.jsonl", model_name="my-model")
    result = fit_ability(model, examples, family="llama")
    result.ability      # put this in the gateway config

Prompt difficulties stay frozen; only the model's logit-ability ``a`` moves:
maximum likelihood of ``score ~ sigmoid(a - logit(x) + offset_family(x))``,
a concave 1-D problem solved by Newton's method.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from classifiers.complexity import ComplexityModel, PromptScore


@dataclass(frozen=True, slots=True)
class Example:
    score: PromptScore
    target: float  # observed score in [0, 1]


@dataclass(frozen=True, slots=True)
class Calibration:
    ability: float
    family: str | None
    n: int
    log_likelihood: float  # mean per prompt
    baseline_log_likelihood: float  # constant prediction = observed mean
    accuracy: float  # (predicted P >= 0.5) == (score >= 0.5)
    mean_predicted: float
    mean_observed: float


def read_examples(path: str, model: ComplexityModel, model_name: str) -> list[Example]:
    """Lines ``{"prompt"|"messages", "score"}`` or shared-data lines with ``scores``."""
    examples = []
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            obj = orjson.loads(line)
            if "score" in obj:
                target = obj["score"]
            elif model_name in obj.get("scores", {}):
                target = obj["scores"][model_name]
            else:
                continue
            if "messages" in obj:
                score = model.score_messages(obj["messages"])
            else:
                score = model.score(obj["prompt"])
            examples.append(Example(score, min(max(float(target), 0.0), 1.0)))
    return examples


def _mean_log_likelihood(z: np.ndarray, y: np.ndarray) -> float:
    # log sigmoid(z) = -log1p(exp(-z)), written stably for both signs.
    log_p = -np.logaddexp(0.0, -z)
    log_q = -np.logaddexp(0.0, z)
    return float(np.mean(y * log_p + (1.0 - y) * log_q))


def fit_ability(model: ComplexityModel, examples: Sequence[Example],
                family: str | None = None, iterations: int = 50) -> Calibration:
    if not examples:
        raise ValueError("no labelled examples for this model")
    offsets = np.asarray([
        (e.score.family_offsets.get(family, 0.0) if family else 0.0) - e.score.logit
        for e in examples
    ])
    y = np.asarray([e.target for e in examples])
    a = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(a + offsets)))
        gradient = float(np.sum(y - p))
        # Tiny ridge keeps Newton finite when every label is 0 or every label is 1.
        hessian = float(np.sum(p * (1.0 - p))) + 1e-3
        step = gradient / hessian
        a += max(min(step, 5.0), -5.0)
        if abs(step) < 1e-9:
            break
    p = 1.0 / (1.0 + np.exp(-(a + offsets)))
    mean = float(np.clip(y.mean(), 1e-6, 1 - 1e-6))
    return Calibration(
        ability=1.0 / (1.0 + math.exp(-a)),
        family=family,
        n=len(examples),
        log_likelihood=_mean_log_likelihood(a + offsets, y),
        baseline_log_likelihood=_mean_log_likelihood(np.full_like(y, math.log(mean / (1 - mean))), y),
        accuracy=float(np.mean((p >= 0.5) == (y >= 0.5))),
        mean_predicted=float(p.mean()),
        mean_observed=float(y.mean()),
    )


def format_calibration(result: Calibration, model_name: str) -> str:
    family = result.family or "(none)"
    return "\n".join([
        f"model: {model_name}   family: {family}   prompts: {result.n}",
        f"ability: {result.ability:.4f}",
        f"mean log-likelihood: {result.log_likelihood:.4f} "
        f"(constant-rate baseline {result.baseline_log_likelihood:.4f})",
        f"accuracy at 0.5: {result.accuracy:.3f}",
        f"mean predicted: {result.mean_predicted:.3f}   mean observed: {result.mean_observed:.3f}",
    ])
