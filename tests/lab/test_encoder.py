"""The reading encoder's numpy forward pass reproduces sentence-transformers' all-MiniLM-L6-v2."""

from __future__ import annotations

import numpy as np
import pytest

from lab.encoder import DIM, load_encoder

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


@pytest.fixture(scope="module")
def static():
    from lab.static_encoder import StaticEncoder

    return StaticEncoder(load_encoder())


def test_static_distillation_is_the_mean_of_each_piece_run_alone(static) -> None:
    encoder = static.encoder
    vectors = static.embed(SENTENCES)
    assert vectors.shape == (3, DIM)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    # Only the pieces seen so far are computed, each as [CLS] piece [SEP] through the encoder.
    ids = static.pieces(SENTENCES[0])
    assert static.known.sum() < 2100 and static.known[ids].all()    # with the reference set
    piece = int(ids[1])
    alone = encoder._forward(np.asarray([[static._cls, piece, static._sep]]),
                             np.ones((1, 3), dtype=np.float32)).mean(axis=1)[0]
    np.testing.assert_allclose(static.table[piece], alone, atol=1e-6)
    center, drop = static._post()
    expected = static.table[ids].mean(axis=0) - center
    expected -= drop @ expected @ drop
    np.testing.assert_allclose(vectors[0], expected / np.linalg.norm(expected), atol=1e-5)
    np.testing.assert_allclose(drop @ vectors[0], 0.0, atol=1e-5)   # the common directions are gone
    # It keeps the encoder's sense of which sentences are alike, if not its numbers.
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 2] and similarity[0, 1] > similarity[1, 2]


def test_static_distillation_bounds_long_and_empty_texts(static) -> None:
    from lab.static_encoder import MAX_PIECES

    assert static.pieces("word " * 100_000).size == MAX_PIECES
    assert static.pieces("").size == 1          # [UNK]: a text with no pieces still embeds
    assert static.embed(["", "word " * 100_000]).shape == (2, DIM)
