"""A prompt as the complexity model reads it, without its text: what a label keeps.

    s = sketch_of(text, n_messages=2)          # or sketch_of_messages(messages)
    blob = s.to_bytes()                        # about 2-6 KB
    PromptSketch.from_bytes(blob)              # SketchError if malformed or from another featurizer

``routegate learn`` fits on sketches, whether its labels came from a file of
prompts or from the gateway's traffic, where the prompt text is kept only
with ``logging.prompts: true``. A sketch holds:

- the hashed n-grams and markers the model reads (``classifiers/features.py``),
- the shape features of its prior (``classifiers/prior.py``),
- a digest of the text, to split labels by prompt and to merge repeats.

About 2-6 KB (a 2,000-character window gives some 3,000 n-gram entries:
sorted, delta-coded and deflated, 1.5 bytes each).

The n-grams are hashed into 2^HASH_BITS buckets, so the text cannot be read
back from them; they are still features of it, which is why labels are kept
per team, under that team's retention. ``from_bytes`` bounds every length (the
inflated size too), checks every index and value, and refuses a sketch from
another featurizer (its ``FORMAT`` line names the hash bits and window).
"""

from __future__ import annotations

import hashlib
import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from classifiers import features
from classifiers.complexity import conversation_text
from classifiers.prior import shape_features

DIGEST_BYTES = 16
# The most n-gram entries a window can give: a word, a bigram and a byte 4-gram per byte.
MAX_ENTRIES = 3 * 4 * (features.HEAD_CHARS + features.TAIL_CHARS + 1)
N_SHAPE = int(shape_features("x").size)
FORMAT = (f"rg-sketch-2:{features.HASH_BITS}:{features.HEAD_CHARS}:{features.TAIL_CHARS}:"
          f"{features.N_DENSE}:{N_SHAPE}").encode()
_HEAD = struct.Struct("<HIII")    # len(FORMAT), words, bigrams, byte 4-grams
_TAIL = 4 * features.N_DENSE + 8 * N_SHAPE


class SketchError(ValueError):
    """Bytes that are not a sketch this featurizer can learn from."""


def _blocks(feats: features.Features) -> tuple[int, int, int]:
    words = feats.n_words
    bigrams = max(words - 1, 0)
    return words, bigrams, int(feats.indices.size) - words - bigrams


@dataclass(frozen=True, slots=True)
class PromptSketch:
    digest: bytes                # blake2b of the text, DIGEST_BYTES long
    feats: features.Features
    shape: np.ndarray            # float64, (N_SHAPE,)

    def to_bytes(self) -> bytes:
        """About 2-6 KB: each block's buckets sorted, delta-coded and deflated (the
        values are 1/sqrt(block size), rebuilt on reading)."""
        counts = _blocks(self.feats)
        deltas, at = [], 0
        for count in counts:
            block = np.sort(self.feats.indices[at:at + count])
            deltas.append(np.diff(block, prepend=0).astype("<u4"))
            at += count
        return b"".join((
            _HEAD.pack(len(FORMAT), *counts), FORMAT, self.digest,
            self.feats.dense.astype("<f4").tobytes(), self.shape.astype("<f8").tobytes(),
            zlib.compress(b"".join(d.tobytes() for d in deltas), 6),
        ))

    @classmethod
    def from_bytes(cls, blob: bytes) -> PromptSketch:
        if len(blob) < _HEAD.size:
            raise SketchError("a sketch too short for its header")
        n_format, *counts = _HEAD.unpack_from(blob)
        at = _HEAD.size
        if blob[at:at + n_format] != FORMAT:
            raise SketchError("a sketch from another featurizer "
                              f"({blob[at:at + min(n_format, 64)]!r}, this one {FORMAT!r})")
        n = sum(counts)
        if n > MAX_ENTRIES or counts[1] != max(counts[0] - 1, 0):
            raise SketchError(f"a sketch with blocks of {counts} entries")
        at += n_format
        if len(blob) < at + DIGEST_BYTES + _TAIL:
            raise SketchError(f"a sketch of {len(blob)} bytes, too short")
        digest = blob[at:at + DIGEST_BYTES]
        at += DIGEST_BYTES
        dense = np.frombuffer(blob, "<f4", features.N_DENSE, at).astype(np.float32)
        shape = np.frombuffer(blob, "<f8", N_SHAPE, at + 4 * features.N_DENSE).astype(np.float64)
        deltas = _inflate(blob[at + _TAIL:], n)
        indices = np.concatenate([np.cumsum(block) for block in
                                  np.split(deltas, np.cumsum(counts)[:-1])]).astype(np.int64)
        if indices.size and (indices.max() >= features.N_HASH):
            raise SketchError("a sketch with an n-gram bucket out of range")
        if not (np.isfinite(dense).all() and np.isfinite(shape).all()):
            raise SketchError("a sketch with a non-finite value")
        values = np.repeat(np.array([1.0 / math.sqrt(c) if c else 0.0 for c in counts],
                                    dtype=np.float32), counts)
        return cls(digest, features.Features(indices, values, dense, counts[0]), shape)


def _inflate(packed: bytes, n: int) -> np.ndarray:
    """The n bucket ids, from their deflated per-block deltas; bounded output."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(packed, 4 * n + 1)
    except zlib.error as exc:
        raise SketchError(f"a sketch whose n-grams do not inflate ({exc})") from None
    if len(raw) != 4 * n or inflater.unconsumed_tail or not inflater.eof:
        raise SketchError("a sketch whose n-grams are not the length its header says")
    return np.frombuffer(raw, "<u4").astype(np.int64)


def digest_of(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=DIGEST_BYTES).digest()


def sketch_of(text: str, *, n_messages: int = 1, has_tools: bool = False,
              has_response_format: bool = False, n_chars: int | None = None) -> PromptSketch:
    """The sketch of one prompt; bounded cost, as ``featurize``. ``n_chars``: the whole
    prompt's length when ``text`` is what a label keeps of it (``labels.kept_text``)."""
    feats = features.featurize(text, n_messages=n_messages, has_tools=has_tools,
                               has_response_format=has_response_format, n_chars=n_chars)
    return PromptSketch(digest_of(text), feats, shape_features(text, n_chars))


def sketch_of_messages(messages: list[dict], *, has_tools: bool = False,
                       has_response_format: bool = False) -> PromptSketch:
    """The sketch of an OpenAI-format conversation, read as ``score_messages`` reads it."""
    return sketch_of(conversation_text(messages), n_messages=max(len(messages), 1),
                     has_tools=has_tools, has_response_format=has_response_format)
