"""wordllama embeddings: offline loading, the per-token scorer, and the fallback without them."""

import logging

import numpy as np
import pytest

from classifiers import semantic
from classifiers.artifact import read_npz
from classifiers.complexity import DEFAULT_ARTIFACT, ComplexityModel
from classifiers.semantic import (
    SEMANTIC_DIM,
    SEMANTIC_HEAD,
    SEMANTIC_TAIL,
    SemanticUnavailable,
    load_embedder,
    semantic_meta,
    semantic_term,
    semantic_window,
    try_load_embedder,
)


@pytest.fixture(scope="module")
def embedder():
    pytest.importorskip("wordllama")  # the optional extra routegate[semantic] (in [dev])
    return load_embedder()


def test_loads_offline_from_the_installed_wheel(embedder) -> None:
    assert embedder.table.shape == (32000, SEMANTIC_DIM)
    vector = embedder.embed("What is the capital of France?")
    assert vector.shape == (SEMANTIC_DIM,) and np.all(np.isfinite(vector))
    assert np.allclose(embedder.embed(""), 0.0)


def test_scorer_is_the_dot_product_of_the_mean_embedding(embedder) -> None:
    weights = np.random.default_rng(0).normal(size=SEMANTIC_DIM)
    score = embedder.scorer(weights)
    for text in ("hi", "Prove that sqrt(2) is irrational.", "x" * 5000, ""):
        assert score(text) == pytest.approx(float(embedder.embed(text) @ weights), abs=1e-6)


def test_window_is_bounded() -> None:
    text = "a" * 10_000 + "tail"
    window = semantic_window(text)
    assert len(window) == SEMANTIC_HEAD + SEMANTIC_TAIL + 1 and window.endswith("tail")
    assert semantic_window("short") == "short"


def test_missing_files_fall_back_with_a_warning(monkeypatch, caplog) -> None:
    def missing():
        raise SemanticUnavailable("no wordllama here")

    monkeypatch.setattr(semantic, "load_embedder", missing)
    with caplog.at_level(logging.WARNING, logger="routegate.classifier"):
        assert try_load_embedder() is None
    assert "semantic features unavailable" in caplog.text
    term = semantic_term(np.ones(SEMANTIC_DIM), semantic_meta(0.25), None)
    assert term("anything") == 0.25


def test_meta_of_another_featurizer_is_refused() -> None:
    meta = semantic_meta(0.0) | {"head_chars": SEMANTIC_HEAD + 1}
    with pytest.raises(ValueError, match="retrain"):
        semantic_term(np.ones(SEMANTIC_DIM), meta, None)


def _with_semantic_block(weights: np.ndarray, mean: float):
    arrays, meta = read_npz(DEFAULT_ARTIFACT)
    return arrays | {"semantic_w": weights}, meta | {"semantic": semantic_meta(mean)}


TEXT = "Prove that there are infinitely many primes congruent to 3 modulo 4."


def test_model_without_wordllama_uses_the_training_mean(monkeypatch, embedder) -> None:
    import classifiers.complexity as complexity

    zero = ComplexityModel(*_with_semantic_block(np.zeros(SEMANTIC_DIM), 0.0))
    monkeypatch.setattr(complexity, "try_load_embedder", lambda: None)
    fallback = ComplexityModel(*_with_semantic_block(np.ones(SEMANTIC_DIM), 0.0))
    assert fallback.score(TEXT).logit == pytest.approx(zero.score(TEXT).logit)


def test_model_adds_the_semantic_term(embedder) -> None:
    zero = ComplexityModel(*_with_semantic_block(np.zeros(SEMANTIC_DIM), 0.0))
    weights = np.sign(embedder.embed(TEXT))  # a term that is surely positive here
    model = ComplexityModel(*_with_semantic_block(weights, 0.0))
    assert model.score(TEXT).logit > zero.score(TEXT).logit


def test_residual_fit_recovers_a_linear_term_on_raw_embeddings() -> None:
    from lab.training import TrainConfig, _semantic_residual

    rng = np.random.default_rng(1)
    raw = rng.normal(loc=0.3, scale=0.1, size=(400, SEMANTIC_DIM))  # a common direction
    true_w = rng.normal(size=SEMANTIC_DIM)
    residual = raw @ true_w - 2.0
    cfg = TrainConfig(semantic_alpha=1e-6)
    oof, weights, intercept = _semantic_residual(raw, residual, np.ones(400), cfg, seed=0)
    assert np.allclose(raw @ weights + intercept, residual, atol=1e-3)
    assert np.corrcoef(oof, residual)[0, 1] > 0.9  # out of fold, still the same line
