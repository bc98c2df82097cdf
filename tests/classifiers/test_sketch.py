"""A prompt's sketch: what labels from traffic keep instead of the text."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from classifiers.complexity import ComplexityModel, conversation_text
from classifiers.features import N_DENSE, featurize
from classifiers.prior import shape_features
from classifiers.sketch import (
    FORMAT,
    N_SHAPE,
    PromptSketch,
    SketchError,
    digest_of,
    sketch_of,
    sketch_of_messages,
)

TEXT = "Prove that every finite integral domain is a field.\n\nUse the pigeonhole principle."


def test_a_sketch_round_trips_and_scores_as_its_text() -> None:
    sketch = sketch_of(TEXT, n_messages=2)
    back = PromptSketch.from_bytes(sketch.to_bytes())
    assert back.digest == sketch.digest and back.feats.n_words == sketch.feats.n_words
    n = sketch.feats.n_words          # within each block the order is not kept, nor needed
    for cut in (slice(0, n), slice(n, 2 * n - 1), slice(2 * n - 1, None)):
        np.testing.assert_array_equal(np.sort(back.feats.indices[cut]),
                                      np.sort(sketch.feats.indices[cut]))
    np.testing.assert_array_equal(back.feats.values, sketch.feats.values)
    np.testing.assert_array_equal(back.feats.dense, featurize(TEXT, n_messages=2).dense)
    np.testing.assert_array_equal(back.shape, shape_features(TEXT))
    model = ComplexityModel.load()
    learned, _, _ = model.raw_parts(back.feats)
    assert model.shrunk_logit(back.shape, back.feats, learned)[0] == pytest.approx(
        model.score(TEXT, n_messages=2).logit, abs=1e-6)
    assert TEXT.encode() not in sketch.to_bytes()


def test_messages_are_sketched_as_the_classifier_reads_them() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXT}]
    text = conversation_text(messages)
    assert sketch_of_messages(messages).to_bytes() == sketch_of(text, n_messages=2).to_bytes()
    assert sketch_of_messages(messages).digest == digest_of(text) != digest_of(TEXT)
    assert sketch_of_messages(messages, has_tools=True).to_bytes() != sketch_of(text).to_bytes()


def test_the_largest_window_fits_and_a_sketch_stays_small() -> None:
    worst = sketch_of("\U0001f600," * 2000)          # 4-byte characters next to punctuation
    assert PromptSketch.from_bytes(worst.to_bytes()).feats.indices.size == worst.feats.indices.size
    prose = sketch_of(open(__file__).read() * 3)
    assert len(prose.to_bytes()) < 8000 < prose.feats.indices.size * 4


@pytest.mark.parametrize("damage", ["short", "format", "truncated", "bomb", "nan", "entries"])
def test_a_damaged_or_foreign_sketch_is_refused(damage: str) -> None:
    blob = bytearray(sketch_of(TEXT).to_bytes())
    head = struct.calcsize("<HIII")
    dense_at = head + len(FORMAT) + 16
    if damage == "short":
        blob = blob[:5]
    elif damage == "format":
        blob[head + 3] ^= 0xFF
    elif damage == "truncated":
        blob = blob[:-3]
    elif damage == "bomb":                    # inflates far past what the header says
        tail = dense_at + 4 * N_DENSE + 8 * N_SHAPE
        blob = blob[:tail] + zlib.compress(bytes(50_000_000))
    elif damage == "nan":
        struct.pack_into("<f", blob, dense_at, float("nan"))
    else:
        struct.pack_into("<HIII", blob, 0, len(FORMAT), 10**6, 10**6 - 1, 0)
    with pytest.raises(SketchError):
        PromptSketch.from_bytes(bytes(blob))
