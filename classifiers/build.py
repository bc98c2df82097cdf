"""Turn fitted weights into the shipped artifact: centring, offsets, tiers, metadata.

    arrays, meta = build_artifact(rows, TrainConfig(), seed=0)
    write_npz("classifiers/artifacts/complexity.npz", arrays, meta)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import scipy.sparse as sp

from classifiers import features
from classifiers.complexity import ARTIFACT_FORMAT
from classifiers.dataset import FAMILIES, PRICED_SOURCE, SKILLS, Row
from classifiers.design import SKILL_SHIFT, fold_for_skills, prompt_matrix
from classifiers.training import TrainConfig, fit_weights

# Reference for ``PromptScore.difficulty``: the cheapest priced training model.
WEAK_REFERENCE = f"{PRICED_SOURCE}/gemma-2-9b-it"


def _prompt_parts(w: dict[str, np.ndarray], hashed: sp.csr_matrix, dense: np.ndarray):
    """Difficulty logits (uncentred) and interaction inputs [skills, dense, logit]."""
    logit = hashed @ w["hash_w"].astype(np.float64) + dense @ w["dense_w"] + w["bias"][0]
    skill = fold_for_skills(hashed) @ w["skill_hash_w"].astype(np.float64)
    skill = skill + dense @ w["skill_dense_w"] + w["skill_bias"]
    skill = np.exp(skill - skill.max(axis=1, keepdims=True))
    skill /= skill.sum(axis=1, keepdims=True)
    return logit, np.hstack([skill, dense, logit[:, None]])


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


def build_artifact(rows: Sequence[Row], cfg: TrainConfig, seed: int):
    w = fit_weights(rows, cfg, seed)
    matrix = prompt_matrix([row.prompt for row in rows])
    logit, mix = _prompt_parts(w, matrix.hashed, matrix.dense)
    keys, offset_w = _offset_table(w)
    centers = (mix @ offset_w.T).mean(axis=0)
    mean_logit = float(logit.mean())
    n_fam = len(FAMILIES)
    # theta - d + o == (theta - mean_d + c + s * mean_d) - (d - mean_d) + (o' - c), where
    # o' is o with the centred logit in the mix, as inference computes it (s: slope weight).
    theta = w["theta"] - mean_logit + centers[n_fam:] + offset_w[n_fam:, -1] * mean_logit
    centred = logit - mean_logit
    model_keys = [str(k) for k in w["model_keys"]]
    arrays = {
        "hash_w": w["hash_w"],
        "dense_w": w["dense_w"],
        "bias": w["bias"] - mean_logit,
        "skill_hash_w": w["skill_hash_w"],
        "skill_dense_w": w["skill_dense_w"],
        "skill_bias": w["skill_bias"],
        "offset_w": offset_w,
        "offset_center": centers,
        "offset_keys": np.asarray(keys),
        "model_keys": np.asarray(model_keys),
        "ability": 1.0 / (1.0 + np.exp(-theta)),
    }
    meta = _meta(cfg, seed, centred, theta[_weak_index(model_keys, theta)])
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
    }
