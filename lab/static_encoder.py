"""A static distillation of the reading encoder (the model2vec recipe).

    static = StaticEncoder(load_encoder())
    static.embed(["What is the capital of Japan?"])   # (1, 384), unit length

Each word piece of all-MiniLM-L6-v2's vocabulary is run through the full
encoder once, alone (``[CLS] piece [SEP]``, mean-pooled), and a prompt's
embedding is the mean of its pieces' vectors: a tokenizer call, a look-up
and a mean at serve time, instead of six attention layers. Raw, those means
all point one way (two unrelated sentences at cosine 0.8), so, as in
"all-but-the-top" (Mu and Viswanath, 2018), the mean of a fixed reference
set of pieces (every ``REFERENCE_STEP``-th word piece, about 1,900) is
taken away and so are its top ``DROP_COMPONENTS`` principal directions
(on sentence-transformers' three example sentences: 0.53 for the related
pair against 0.50 and 0.43; the full encoder's 0.67, 0.10, 0.14). A piece's vector
is computed the first time a prompt holds it, in one batch per call;
``fill()`` computes the whole vocabulary (30,522 pieces, about a minute on
this CPU). Cost is bounded: the prompt is cut to ``MAX_CHARS`` characters
and ``max_pieces`` pieces. Whether it pays is measured, not assumed:
``python -m lab.encoder_table`` (quality on prompts no model trained
on) and ``python -m loadtest.bench_classifier --encoder`` (cost).
"""

from __future__ import annotations

import numpy as np

from lab.encoder import DIM, Encoder

MAX_PIECES = 512
REFERENCE_STEP = 16
DROP_COMPONENTS = 3
MAX_CHARS = 8 * MAX_PIECES    # a word piece is rarely under a character, rarely over eight
BATCH = 1024
_CLS, _SEP, _UNK = "[CLS]", "[SEP]", "[UNK]"


class StaticEncoder:
    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        tokenizer = encoder.tokenizer
        self._cls, self._sep = tokenizer.token_to_id(_CLS), tokenizer.token_to_id(_SEP)
        self._unk = tokenizer.token_to_id(_UNK)
        size = tokenizer.get_vocab_size()
        self.table = np.zeros((size, DIM), dtype=np.float32)
        self.known = np.zeros(size, dtype=bool)
        self._center: np.ndarray | None = None
        self._drop: np.ndarray | None = None     # DROP_COMPONENTS x DIM, orthonormal rows

    def fill(self, ids: np.ndarray | None = None) -> None:
        """Compute the vectors of ``ids`` (default: the whole vocabulary) not known yet."""
        ids = np.arange(self.known.size) if ids is None else np.unique(ids)
        missing = ids[~self.known[ids]]
        for start in range(0, missing.size, BATCH):
            chunk = missing[start:start + BATCH]
            pieces = np.stack([np.full_like(chunk, self._cls), chunk,
                               np.full_like(chunk, self._sep)], axis=1)
            hidden = self.encoder._forward(pieces, np.ones(pieces.shape, dtype=np.float32))
            self.table[chunk] = hidden.mean(axis=1)
            self.known[chunk] = True

    def _post(self) -> tuple[np.ndarray, np.ndarray]:
        """(centre, directions to drop), from the reference pieces, computed once."""
        if self._center is None or self._drop is None:
            vocab = self.encoder.tokenizer.get_vocab()
            words = sorted(i for token, i in vocab.items() if not token.startswith("["))
            reference = np.asarray(words[::REFERENCE_STEP], dtype=np.int64)
            self.fill(reference)
            rows = self.table[reference].astype(np.float64)
            self._center = rows.mean(axis=0)
            self._drop = np.linalg.svd(rows - self._center, full_matrices=False)[2][
                :DROP_COMPONENTS]
        return self._center, self._drop

    def pieces(self, text: str, max_pieces: int = MAX_PIECES) -> np.ndarray:
        tokenizer = self.encoder.tokenizer
        tokenizer.no_truncation()      # ``Encoder.embed`` sets its own on every call
        ids = tokenizer.encode(text[:MAX_CHARS], add_special_tokens=False).ids[:max_pieces]
        return np.asarray(ids or [self._unk], dtype=np.int64)

    def embed(self, texts: list[str], max_pieces: int = MAX_PIECES) -> np.ndarray:
        """(len(texts), DIM) unit vectors: the mean of each text's pieces' vectors."""
        ids = [self.pieces(t, max_pieces) for t in texts]
        if ids:
            self.fill(np.concatenate(ids))
        center, drop = self._post()
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, row in enumerate(ids):
            mean = self.table.take(row, axis=0).mean(axis=0) - center
            mean -= (drop @ mean) @ drop
            out[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
        return out
