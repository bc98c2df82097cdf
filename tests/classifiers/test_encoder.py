"""The reading encoder's numpy forward pass reproduces sentence-transformers' all-MiniLM-L6-v2."""

from __future__ import annotations

import numpy as np
import pytest

from classifiers.encoder import DIM, load_encoder

# sentence-transformers' README, for all-MiniLM-L6-v2: model.similarity(embeddings, embeddings)
SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
PUBLISHED = np.array([[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411],
                      [0.1046, 0.1411, 1.0000]])


def test_the_published_similarities_to_four_digits() -> None:
    vectors = load_encoder().embed(SENTENCES)
    assert vectors.shape == (3, DIM) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(vectors @ vectors.T, PUBLISHED, atol=6e-5)


def test_a_batch_embeds_each_text_as_alone_and_long_texts_are_cut() -> None:
    encoder = load_encoder()
    alone = encoder.embed([SENTENCES[1]])[0]
    padded = encoder.embed(["a much longer sentence, so that this one is padded " * 3,
                            SENTENCES[1]])[1]
    np.testing.assert_allclose(alone, padded, atol=1e-5)
    long = "word " * 5000
    assert encoder.embed([long], max_tokens=64).shape == (1, DIM)
    assert encoder.embed([long], max_tokens=64)[0] == pytest.approx(
        encoder.embed(["word " * 62], max_tokens=64)[0], abs=1e-5)
