"""Fitting the complexity model with scikit-learn, in three cross-fitted stages.

    weights = fit_weights(rows, TrainConfig(), seed=0)   # -> dict of numpy arrays

The model (see ``classifiers/complexity.py`` for inference) is

    P(model m answers x) = sigmoid(theta_m - d(x) + o_m(x))
    d(x)   = slope * (w . hashed(x) + v . dense(x))           prompt difficulty
    o_m(x) = (U[family(m)] + R[m]) . z(x) + Q[m] . dense(x)   interaction
             - s_m * d(x)                                      own difficulty slope
    z(x)   = softmax(skill classifier(x))                      16 skills

Stages, all plain sklearn estimators on sparse matrices:

1. skill classifier: multinomial logistic regression from hashed features to
   the skill of the row's task; out-of-fold posteriors feed stages 2 and 3.
2. item response fit: logistic regression on (prompt, model) pairs with a
   free ability per model and the interaction blocks, then a one-step
   estimate of each prompt's own difficulty. Those difficulties are the
   target of
3. difficulty regression: ridge from hashed + dense features to the
   difficulties of stage 2 (weighted by how many outcomes each prompt has).
4. final fit: logistic regression on pairs with the out-of-fold predicted
   difficulty as one column (its coefficient is the calibration slope) plus
   abilities and interactions; so those are fitted against the noise level
   that inference will have. Each model also gets its own deviation s_m from
   that slope (a 2PL discrimination): strong models lose less to a hard prompt.

L2 strength per block is set by scaling the block's columns (a penalty C on a
column scaled by s is a penalty C*s**2 on the effective weight).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold

from classifiers.features import N_DENSE, N_HASH
from classifiers.semantic import Embedder
from lab.dataset import FAMILIES, SKILL_OF_TASK, SKILLS, Row
from lab.design import (
    Pairs,
    PromptMatrix,
    build_pairs,
    crossed,
    family_index,
    fold_for_skills,
    one_hot,
    prompt_matrix,
)

logger = logging.getLogger("routegate.train")


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """Hyper-parameters, chosen on seeded 20% prompt hold-outs of llmrouter_train (PROVENANCE.md)."""

    folds: int = 4
    skill_c: float = 10.0
    item_prior: float = 1.0  # prior precision of a per-prompt difficulty in stage 2
    ability_scale: float = 10.0  # abilities are nearly unpenalised
    family_scale: float = 3.0
    model_skill_scale: float = 3.0
    model_dense_scale: float = 1.0
    model_slope_scale: float = 1.0  # per-model deviation from the shared difficulty slope
    ridge_alpha: float = 10.0
    pair_c: float = 1.0
    max_iter: int = 500
    # Training quantile of seen-bigram counts at which the learned difficulty gets full
    # weight; below it, d(x) is shrunk toward the shape prior (classifiers/prior.py).
    closeness_quantile: float = 0.5
    # With full evidence, d(x) = prior + learned_weight * (learned - prior); an
    # inference-time setting kept in the artifact (1 = the learned logit all the way).
    # Out of fold, within a task, the n-gram logit ranks no better than the prior; half
    # its pull ranked held-out tasks' prompts best (PROVENANCE.md, "Issue 22").
    learned_weight: float = 0.5
    # Ridge penalty of the wordllama embedding fit on stage 3's residuals (standardized
    # columns); 0 = no semantic features (classifiers/semantic.py).
    semantic_alpha: float = 0.0


def skill_labels(rows: Sequence[Row]) -> np.ndarray:
    return np.asarray([SKILLS.index(SKILL_OF_TASK[row.task]) for row in rows], dtype=np.int64)


def _skill_design(matrix: PromptMatrix) -> sp.csr_matrix:
    return sp.hstack([fold_for_skills(matrix.hashed), sp.csr_matrix(matrix.dense)], format="csr")


def _fit_skills(design: sp.csr_matrix, labels: np.ndarray, cfg: TrainConfig) -> LogisticRegression:
    model = LogisticRegression(C=cfg.skill_c, max_iter=cfg.max_iter, tol=1e-3)
    return model.fit(design, labels)


def skill_posteriors_oof(matrix: PromptMatrix, labels: np.ndarray, cfg: TrainConfig, seed: int):
    """Out-of-fold skill posteriors for training rows, plus the classifier fit on all rows."""
    design = _skill_design(matrix)
    oof = np.zeros((design.shape[0], len(SKILLS)))
    for train, held in KFold(cfg.folds, shuffle=True, random_state=seed).split(labels):
        model = _fit_skills(design[train], labels[train], cfg)
        oof[np.ix_(held, model.classes_)] = model.predict_proba(design[held])
    return oof, _fit_skills(design, labels, cfg)


def _interaction_blocks(pairs: Pairs, z: np.ndarray, dense: np.ndarray, fam: np.ndarray,
                        n_models: int, cfg: TrainConfig) -> list[sp.csr_matrix]:
    zp, dp = z[pairs.prompt], dense[pairs.prompt]
    return [
        one_hot(pairs.model, n_models, cfg.ability_scale),
        crossed(fam[pairs.model], len(FAMILIES), zp, cfg.family_scale),
        crossed(pairs.model, n_models, zp, cfg.model_skill_scale),
        crossed(pairs.model, n_models, dp, cfg.model_dense_scale),
    ]


def _fit_pairs(blocks: list[sp.csr_matrix], pairs: Pairs, cfg: TrainConfig) -> np.ndarray:
    design = sp.hstack(blocks, format="csr")
    model = LogisticRegression(C=cfg.pair_c, fit_intercept=False, max_iter=cfg.max_iter, tol=1e-4)
    model.fit(design, pairs.label, sample_weight=pairs.weight)
    return model.coef_.ravel()


def item_difficulties(pairs: Pairs, z: np.ndarray, dense: np.ndarray, fam: np.ndarray,
                      n_models: int, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """Stage 2: per-prompt difficulty and its information (weight for stage 3).

    Fits abilities and interactions without prompt terms, then takes one Newton
    step for a per-prompt difficulty b_p with a N(0, 1/item_prior) prior:
    b_p = sum_m (p_pm - y_pm) / (sum_m p_pm (1 - p_pm) + item_prior). This is
    the usual one-step estimate of an item random effect and avoids a logistic
    regression with one column per prompt (minutes instead of seconds).
    """
    blocks = _interaction_blocks(pairs, z, dense, fam, n_models, cfg)
    design = sp.hstack(blocks, format="csr")
    coef = _fit_pairs(blocks, pairs, cfg)
    p = 1.0 / (1.0 + np.exp(-(design @ coef)))
    n_prompts = z.shape[0]
    residual = np.bincount(pairs.prompt, weights=pairs.weight * (p - pairs.label),
                           minlength=n_prompts)
    information = np.bincount(pairs.prompt, weights=pairs.weight * p * (1.0 - p),
                              minlength=n_prompts)
    return residual / (information + cfg.item_prior), information


def _difficulty_design(matrix: PromptMatrix) -> sp.csr_matrix:
    return sp.hstack([matrix.hashed, sp.csr_matrix(matrix.dense)], format="csr")


def _semantic_residual(semantic: np.ndarray, residual: np.ndarray, weight: np.ndarray,
                       cfg: TrainConfig, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Stage 3b: ridge of what the n-grams left (out of fold) on the embeddings.

    A separate fit, so the n-gram solve is exactly the one without embeddings
    (256 dense columns in the same lsqr solve changed its early stop). Returns
    out-of-fold predictions, raw-embedding weights and the intercept.
    """
    mean, std = semantic.mean(axis=0), np.maximum(semantic.std(axis=0), 1e-6)
    z = (semantic - mean) / std  # a common direction in raw embeddings: standardize

    def fit(rows: np.ndarray) -> Ridge:
        return Ridge(alpha=cfg.semantic_alpha).fit(z[rows], residual[rows], sample_weight=weight[rows])

    oof = np.zeros(residual.size)
    for train, held in KFold(cfg.folds, shuffle=True, random_state=seed + 2).split(residual):
        oof[held] = fit(train).predict(z[held])
    model = fit(np.arange(residual.size))
    raw = model.coef_ / std
    return oof, raw, float(model.intercept_ - raw @ mean)


def _fit_ridge(design: sp.csr_matrix, target: np.ndarray, weight: np.ndarray,
               cfg: TrainConfig) -> np.ndarray:
    """Weighted ridge; returns the coefficients with the intercept appended.

    Weighted least squares is solved as ordinary least squares on rows scaled by
    sqrt(weight), with the intercept as a sqrt(weight) column (its penalty is
    negligible next to the total weight). sklearn's own sample-weight path for
    sparse input corrupted memory (scipy 1.17 dia @ csr) on this data.
    """
    root = np.sqrt(weight)
    scaled = sp.csr_matrix(design, copy=True)
    scaled.data *= np.repeat(root, np.diff(scaled.indptr))
    scaled = sp.hstack([scaled, sp.csr_matrix(root[:, None])], format="csr")
    ridge = Ridge(alpha=cfg.ridge_alpha, fit_intercept=False, solver="lsqr", tol=1e-4)
    return ridge.fit(scaled, target * root).coef_


def difficulty_regression(matrix: PromptMatrix, target: np.ndarray, weight: np.ndarray,
                          cfg: TrainConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stage 3: out-of-fold predictions plus coefficients fit on all prompts."""
    design = _difficulty_design(matrix)
    oof = np.zeros(design.shape[0])
    for train, held in KFold(cfg.folds, shuffle=True, random_state=seed + 1).split(target):
        coef = _fit_ridge(design[train], target[train], weight[train], cfg)
        oof[held] = design[held] @ coef[:-1] + coef[-1]
    coef = _fit_ridge(design, target, weight, cfg)
    if matrix.semantic is None:
        return oof, coef
    extra, semantic_w, intercept = _semantic_residual(matrix.semantic, target - oof, weight, cfg, seed)
    return oof + extra, np.concatenate([coef[:-1], semantic_w, [coef[-1] + intercept]])


def fit_weights(rows: Sequence[Row], cfg: TrainConfig, seed: int,
                embedder: Embedder | None = None) -> dict[str, np.ndarray]:
    """All four stages; returns the numpy arrays inference needs (uncentred).

    ``embedder`` adds the semantic block to the difficulty regression.
    """
    model_keys = sorted({key for row in rows for key in row.scores})
    n_models = len(model_keys)
    fam = family_index(model_keys, FAMILIES)
    start = time.monotonic()
    matrix = prompt_matrix([row.prompt for row in rows], embedder)
    logger.info("featurized %d prompts (%.0fs)", len(rows), time.monotonic() - start)
    z_oof, skills = skill_posteriors_oof(matrix, skill_labels(rows), cfg, seed)
    logger.info("stage 1 skills done (%.0fs)", time.monotonic() - start)
    pairs = build_pairs(rows, model_keys)
    items, information = item_difficulties(pairs, z_oof, matrix.dense, fam, n_models, cfg)
    logger.info("stage 2 item difficulties done (%.0fs)", time.monotonic() - start)
    _require_finite("item difficulties", items, information)
    d_oof, ridge = difficulty_regression(matrix, items, information + 1e-3, cfg, seed)
    _require_finite("difficulty regression", d_oof, ridge)
    logger.info("stage 3 difficulty regression done (%.0fs)", time.monotonic() - start)
    minus_d = -d_oof[pairs.prompt][:, None]
    blocks = [sp.csr_matrix(minus_d)]
    blocks += _interaction_blocks(pairs, z_oof, matrix.dense, fam, n_models, cfg)
    blocks.append(crossed(pairs.model, n_models, minus_d, cfg.model_slope_scale))
    coef = _fit_pairs(blocks, pairs, cfg)
    logger.info("stage 4 final fit done (%.0fs)", time.monotonic() - start)
    return _unpack(coef, ridge, skills, model_keys, fam, cfg)


def _require_finite(stage: str, *arrays: np.ndarray) -> None:
    # A diverged solver must stop training rather than ship NaN weights.
    for array in arrays:
        if not np.all(np.isfinite(array)):
            raise FloatingPointError(f"{stage}: non-finite values")


def _unpack(coef: np.ndarray, ridge: np.ndarray, skills: LogisticRegression,
            model_keys: list[str], fam: np.ndarray, cfg: TrainConfig) -> dict[str, np.ndarray]:
    n_models, n_skills, n_fam = len(model_keys), len(SKILLS), len(FAMILIES)
    slope, rest = coef[0], coef[1:]
    cuts = np.cumsum([n_models, n_fam * n_skills, n_models * n_skills, n_models * N_DENSE])
    ability, fam_w, model_w, model_dense, model_slope = np.split(rest, cuts)
    # Skill classifier columns may miss a class only if a class had no rows.
    skill_coef = np.zeros((len(SKILLS), skills.coef_.shape[1]))
    skill_coef[skills.classes_] = skills.coef_
    skill_bias = np.full(len(SKILLS), -30.0)
    skill_bias[skills.classes_] = skills.intercept_
    n_fold = skill_coef.shape[1] - N_DENSE
    semantic = {"semantic_w": slope * ridge[N_HASH + N_DENSE : -1]}
    return {
        "hash_w": (slope * ridge[:N_HASH]).astype(np.float32),
        "dense_w": slope * ridge[N_HASH : N_HASH + N_DENSE],
        "bias": np.asarray([slope * ridge[-1]]),
        **(semantic if ridge.size > N_HASH + N_DENSE + 1 else {}),
        "theta": ability * cfg.ability_scale,
        "family_skill": (fam_w * cfg.family_scale).reshape(n_fam, n_skills),
        "model_skill": (model_w * cfg.model_skill_scale).reshape(n_models, n_skills),
        "model_dense": (model_dense * cfg.model_dense_scale).reshape(n_models, N_DENSE),
        # weight on the final logit d(x) = slope * ridge(x): -s_m * ridge(x) = -(s_m / slope) * d(x)
        "model_logit": -model_slope * cfg.model_slope_scale / slope,
        "model_family": fam,
        "skill_hash_w": skill_coef[:, :n_fold].T.astype(np.float32).copy(),
        "skill_dense_w": skill_coef[:, n_fold:].T.copy(),
        "skill_bias": skill_bias,
        "model_keys": np.asarray(model_keys),
    }
