"""Design matrices for training: prompt features and (prompt, model) pairs.

Everything here is a pure function of the rows and the shared featurizer, so
``routegate train`` and the tests build exactly what inference will see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from classifiers.features import HASH_BITS, N_HASH, Features, featurize
from classifiers.semantic import Embedder
from lab.dataset import Row, family_of

SKILL_BITS = 14
# The skill classifier folds the hash space to 2**SKILL_BITS buckets (top bits
# of the bucket id) so its per-skill weight matrix stays small in the artifact.
SKILL_SHIFT = HASH_BITS - SKILL_BITS


@dataclass(frozen=True, slots=True)
class PromptMatrix:
    hashed: sp.csr_matrix  # (n_prompts, N_HASH)
    dense: np.ndarray  # (n_prompts, N_DENSE)
    semantic: np.ndarray | None = None  # (n_prompts, SEMANTIC_DIM) mean token embeddings


@dataclass(frozen=True, slots=True)
class Pairs:
    """One row per (prompt, model, outcome); fractional scores become two weighted rows."""

    prompt: np.ndarray  # prompt row index
    model: np.ndarray  # index into model_keys
    label: np.ndarray  # 0/1
    weight: np.ndarray  # sample weight


def prompt_matrix(prompts: Sequence[str], embedder: Embedder | None = None) -> PromptMatrix:
    """Hashed n-grams and markers of each prompt, plus its embedding when ``embedder`` is given."""
    hashed, dense = feature_matrix([featurize(text) for text in prompts])
    semantic = embedder.embed_many(prompts) if embedder is not None else None
    return PromptMatrix(hashed=hashed, dense=dense, semantic=semantic)


def feature_matrix(rows: Sequence[Features]) -> tuple[sp.csr_matrix, np.ndarray]:
    """(hashed n-grams as a CSR matrix, dense markers) of featurized prompts."""
    indptr = np.cumsum([0] + [f.indices.size for f in rows])
    hashed = sp.csr_matrix(
        (
            np.concatenate([f.values for f in rows]).astype(np.float64),
            np.concatenate([f.indices for f in rows]).astype(np.int32),
            indptr.astype(np.int32),
        ),
        shape=(len(rows), N_HASH),
    )
    hashed.sum_duplicates()  # repeated n-grams add up, as in the inference dot product
    return hashed, np.vstack([f.dense for f in rows]).astype(np.float64)


def fold_for_skills(hashed: sp.csr_matrix) -> sp.csr_matrix:
    # Copies: sum_duplicates() rewrites data and indptr in place, and sharing
    # them with ``hashed`` silently corrupted it (NaNs, then heap errors).
    folded = sp.csr_matrix(
        (hashed.data.copy(), (hashed.indices >> SKILL_SHIFT).astype(np.int32),
         hashed.indptr.copy()),
        shape=(hashed.shape[0], N_HASH >> SKILL_SHIFT),
    )
    folded.sum_duplicates()
    return folded


def build_pairs(rows: Sequence[Row], model_keys: Sequence[str]) -> Pairs:
    position = {key: i for i, key in enumerate(model_keys)}
    prompt, model, label, weight = [], [], [], []
    for p, row in enumerate(rows):
        for key, score in row.scores.items():
            for y, w in ((1, score), (0, 1.0 - score)):
                if w > 1e-6:
                    prompt.append(p)
                    model.append(position[key])
                    label.append(y)
                    weight.append(w)
    return Pairs(
        prompt=np.asarray(prompt, dtype=np.int64),
        model=np.asarray(model, dtype=np.int64),
        label=np.asarray(label, dtype=np.int64),
        weight=np.asarray(weight, dtype=np.float64),
    )


def family_index(model_keys: Sequence[str], families: Sequence[str]) -> np.ndarray:
    """Family position of each model key, -1 when the model has no known family."""
    names = list(families)
    out = []
    for key in model_keys:
        family = family_of(key.split("/", 1)[1])
        out.append(names.index(family) if family in names else -1)
    return np.asarray(out, dtype=np.int64)


def one_hot(index: np.ndarray, width: int, scale: float) -> sp.csr_matrix:
    n = index.size
    keep = index >= 0
    return sp.csr_matrix(
        (np.full(int(keep.sum()), scale), (np.flatnonzero(keep), index[keep])), shape=(n, width)
    )


def crossed(index: np.ndarray, width: int, values: np.ndarray, scale: float) -> sp.csr_matrix:
    """Row i has ``values[i]`` in the column block of ``index[i]`` (block-diagonal kron)."""
    n, k = values.shape
    keep = index >= 0
    rows = np.repeat(np.flatnonzero(keep), k)
    cols = (index[keep][:, None] * k + np.arange(k)[None, :]).ravel()
    data = (values[keep] * scale).ravel()
    return sp.csr_matrix((data, (rows, cols)), shape=(n, width * k))

