"""Turn fitted weights into the shipped artifact: centring, offsets, tiers, metadata.

    arrays, meta = build_artifact(rows, TrainConfig(), seed=0)
    write_npz("classifiers/artifacts/complexity.npz", arrays, meta)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from classifiers import features
from classifiers.complexity import ARTIFACT_FORMAT
from classifiers.prior import bigram_buckets, closeness, fit_prior, prior_inputs, seen_buckets
from classifiers.rarity import build_table
from classifiers.semantic import Embedder, load_embedder, semantic_meta
from lab.dataset import FAMILIES, PRICED_SOURCE, SKILLS, Row
from lab.design import SKILL_SHIFT, PromptMatrix, fold_for_skills, prompt_matrix
from lab.training import TrainConfig, fit_weights

# Reference for ``PromptScore.difficulty``: the cheapest priced training model.
WEAK_REFERENCE = f"{PRICED_SOURCE}/gemma-2-9b-it"


def _prompt_parts(w: dict[str, np.ndarray], matrix: PromptMatrix):
    """Difficulty logits (uncentred) and interaction inputs [skills, dense, logit]."""
    hashed, dense = matrix.hashed, matrix.dense
    logit = hashed @ w["hash_w"].astype(np.float64) + dense @ w["dense_w"] + w["bias"][0]
    if "semantic_w" in w:
        logit = logit + _semantic_terms(w, matrix)
    skill = fold_for_skills(hashed) @ w["skill_hash_w"].astype(np.float64)
    skill = skill + dense @ w["skill_dense_w"] + w["skill_bias"]
    skill = np.exp(skill - skill.max(axis=1, keepdims=True))
    skill /= skill.sum(axis=1, keepdims=True)
    return logit, np.hstack([skill, dense, logit[:, None]])


def _semantic_terms(w: dict[str, np.ndarray], matrix: PromptMatrix) -> np.ndarray:
    if matrix.semantic is None:
        raise ValueError("weights have a semantic block but the prompts were not embedded")
    return matrix.semantic @ w["semantic_w"]


def _offset_table(w: dict[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    """Rows: each family, then each training model (family + own deviation).

    Columns: skills, dense markers, then the difficulty logit (a training model's
    own slope deviation; families keep the shared slope, so 0 there).
    """
    n_dense = features.N_DENSE
    keys = list(FAMILIES)
    rows = [np.concatenate([w["family_skill"][f], np.zeros(n_dense + 1)])
            for f in range(len(keys))]
    for m, key in enumerate(w["model_keys"]):
        fam = int(w["model_family"][m])
        skill = w["model_skill"][m] + (w["family_skill"][fam] if fam >= 0 else 0.0)
        rows.append(np.concatenate([skill, w["model_dense"][m], [w["model_logit"][m]]]))
        keys.append(str(key).split("/", 1)[1])
    return keys, np.vstack(rows)


def _prior_arrays(rows: Sequence[Row], learned: np.ndarray, quantile: float,
                  learned_weight: float) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, str]]:
    """Prior weights (shape, word rarity), the rarity table, seen bigram buckets and
    reference count; the training d(x) after shrinking; the table's provenance."""
    table, provenance = build_table()
    feats, shape, rarity = prior_inputs([row.prompt for row in rows], table)
    n_shape, x = shape.shape[1], np.hstack([shape, rarity])
    coef, prior_b = fit_prior(x, learned,
                              [f"{row.source}|{row.task}" for row in rows],
                              between=range(n_shape, n_shape + rarity.shape[1]))
    seen, own = seen_buckets([bigram_buckets(f) for f in feats], features.N_HASH)
    reference = float(np.quantile(own, quantile))
    weight = np.asarray([closeness(int(n), reference) for n in own])
    prior = x @ coef + prior_b
    arrays = {"prior_w": coef[:n_shape], "prior_r": coef[n_shape:], "word_zipf": table,
              "prior_b": np.asarray([prior_b]),
              "seen_bits": np.packbits(seen), "seen_reference": np.asarray([reference])}
    return arrays, prior + learned_weight * weight * (learned - prior), provenance


def build_artifact(rows: Sequence[Row], cfg: TrainConfig, seed: int):
    # wordllama is required to train with semantic features: no silent fallback here.
    embedder = load_embedder() if cfg.semantic_alpha > 0 else None
    return assemble_artifact(rows, fit_weights(rows, cfg, seed, embedder), cfg, seed, embedder)


def assemble_artifact(rows: Sequence[Row], w: dict[str, np.ndarray], cfg: TrainConfig, seed: int,
                      embedder: Embedder | None = None):
    """Arrays and metadata from fitted weights (reusable across prior settings)."""
    matrix = prompt_matrix([row.prompt for row in rows], embedder)
    logit, mix = _prompt_parts(w, matrix)
    keys, offset_w = _offset_table(w)
    centers = (mix @ offset_w.T).mean(axis=0)
    mean_logit = float(logit.mean())
    n_fam = len(FAMILIES)
    # theta - d + o == (theta - mean_d + c + s * mean_d) - (d - mean_d) + (o' - c), where
    # o' is o with the centred logit in the mix, as inference computes it (s: slope weight).
    theta = w["theta"] - mean_logit + centers[n_fam:] + offset_w[n_fam:, -1] * mean_logit
    # The average training model's offset belongs to the prompt's difficulty (a model
    # with no family must see that GPQA is harder than GSM8K); offsets become
    # deviations from it, so every training model's prediction is unchanged.
    mean_w, mean_c = offset_w[n_fam:].mean(axis=0), float(centers[n_fam:].mean())
    mix[:, -1] -= mean_logit
    learned = logit - mean_logit - (mix @ mean_w - mean_c)
    prior_arrays, final, words = _prior_arrays(rows, learned, cfg.closeness_quantile,
                                               cfg.learned_weight)
    model_keys = [str(k) for k in w["model_keys"]]
    arrays = {
        "hash_w": w["hash_w"],
        "dense_w": w["dense_w"],
        "bias": w["bias"] - mean_logit,
        "skill_hash_w": w["skill_hash_w"],
        "skill_dense_w": w["skill_dense_w"],
        "skill_bias": w["skill_bias"],
        "offset_w": offset_w - mean_w,
        "offset_center": centers - mean_c,
        "mean_offset_w": mean_w,
        "mean_offset_center": np.asarray([mean_c]),
        **prior_arrays,
        "offset_keys": np.asarray(keys),
        "model_keys": np.asarray(model_keys),
        "ability": 1.0 / (1.0 + np.exp(-theta)),
    }
    meta = _meta(cfg, seed, final, theta[_weak_index(model_keys, theta)])
    meta["word_frequency"] = words
    if "semantic_w" in w:
        arrays["semantic_w"] = w["semantic_w"]
        meta["semantic"] = semantic_meta(float(_semantic_terms(w, matrix).mean()))
    return arrays, meta


def _weak_index(model_keys: list[str], theta: np.ndarray) -> int:
    """The weak reference; without it (a source left out in validation), the weakest model."""
    return model_keys.index(WEAK_REFERENCE) if WEAK_REFERENCE in model_keys else int(np.argmin(theta))


def _meta(cfg: TrainConfig, seed: int, centred: np.ndarray, weak_logit: float) -> dict[str, Any]:
    return {
        "format": ARTIFACT_FORMAT,
        "seed": seed,
        "config": asdict(cfg),
        "hash_bits": features.HASH_BITS,
        "head_chars": features.HEAD_CHARS,
        "tail_chars": features.TAIL_CHARS,
        "dense_names": list(features.DENSE_NAMES),
        "skill_shift": SKILL_SHIFT,
        "skills": list(SKILLS),
        "families": list(FAMILIES),
        "tier_cuts": [round(float(q), 6) for q in np.quantile(centred, [1 / 3, 2 / 3])],
        "weak_model": WEAK_REFERENCE,
        "weak_logit": round(float(weak_logit), 6),
        "learned_weight": cfg.learned_weight,
    }
