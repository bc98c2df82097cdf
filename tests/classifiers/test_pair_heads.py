"""Pair heads: the gains a ladder's neighbours are told apart by, and how they chain."""

from __future__ import annotations

import numpy as np
import pytest

from classifiers.pair_heads import PairHead, chained, heads_from_arrays, heads_to_arrays
from classifiers.static_embedding import StaticEmbedding


def _head(weak: str, strong: str, kind: str, mix, dims: int = 4, calib=None) -> PairHead:
    rng = np.random.default_rng(len(weak) + len(strong))
    x = rng.normal(size=(6, dims))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cx, cy = calib if calib is not None else (np.zeros(0), np.zeros(0))
    return PairHead(weak, strong, kind, np.asarray(mix, float),
                    rng.normal(size=dims).astype(np.float32), 0.1, x.astype(np.float16),
                    np.linspace(-0.5, 1.0, 6).astype(np.float32), 2, cx, cy)


def test_without_heads_the_chain_gives_back_each_models_own_p() -> None:
    p = {"small": 0.55, "medium": 0.71, "large": 0.86, "other": 0.4}
    assert chained(p, ["small", "medium", "large"], {}) == pytest.approx(p)


def test_a_pair_head_moves_only_the_models_below_its_strong_one() -> None:
    p = {"small": 0.55, "medium": 0.71, "large": 0.86, "other": 0.4}
    out = chained(p, ["small", "medium", "large"], {("small", "medium"): 0.02})
    assert out["large"] == p["large"] and out["medium"] == p["medium"]   # untouched
    assert out["other"] == p["other"]                                     # off the ladder
    assert out["small"] == pytest.approx(0.71 - 0.02)     # the head, not 0.71 - 0.55
    top = chained(p, ["small", "medium", "large"], {("medium", "large"): 0.5})
    assert top["medium"] == pytest.approx(0.36)
    # below it, the IRT's own difference (0.16) from the new medium: the ladder's order
    assert top["small"] == pytest.approx(0.36 - 0.16)
    assert chained(p, ["small", "medium"], {("small", "medium"): 2.0})["small"] == 0.0


def test_a_head_is_its_mix_of_irt_ridge_and_neighbours_then_calibrated() -> None:
    emb = np.asarray([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    irt_only = _head("a", "b", "irt", (1, 0, 0))
    assert irt_only.gain(emb, 0.3) == pytest.approx(0.3) and not irt_only.reads_embedding
    ridge = _head("a", "b", "ridge", (0, 1, 0))
    assert ridge.gain(emb, 0.3) == pytest.approx(float(ridge.ridge_w[0]) + 0.1, rel=1e-5)
    knn = _head("a", "b", "knn", (0, 0, 1))
    nearest = np.argsort(-(knn.knn_x.astype(np.float32) @ emb))[:2]
    assert knn.gain(emb, 0.3) == pytest.approx(float(knn.knn_y[nearest].mean()), rel=1e-5)
    calibrated = _head("a", "b", "irt", (1, 0, 0), calib=(np.asarray([0.0, 0.4]),
                                                          np.asarray([0.0, 1.0])))
    assert calibrated.gain(None, 0.2) == pytest.approx(0.5)
    assert calibrated.raw_gain(None, 0.2) == pytest.approx(0.2)


def test_heads_round_trip_through_the_artifacts_arrays() -> None:
    static = StaticEmbedding.load()
    dims = static.dims
    heads = [_head("small", "medium", "blend", (1 / 3, 1 / 3, 1 / 3), dims,
                   (np.asarray([-0.2, 0.5]), np.asarray([0.0, 0.9]))),
             _head("medium", "large", "irt", (1, 0, 0), dims)]
    back = heads_from_arrays(heads_to_arrays(["small", "medium", "large"], heads), static)
    assert back is not None and back.ladder == ["small", "medium", "large"]
    irt = {"small": 0.6, "medium": 0.7, "large": 0.9}
    text = "Write a Python function that reverses a linked list."
    emb = static.embed(text)
    want = {("small", "medium"): heads[0].gain(emb, 0.1), ("medium", "large"): 0.2}
    assert back.gains(text, irt) == pytest.approx(want, rel=1e-3)
    with pytest.raises(ValueError, match="static embedding"):
        heads_from_arrays(heads_to_arrays(["small", "medium", "large"], heads), None)
