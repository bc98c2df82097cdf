"""A prompt as the complexity model reads it, without its text: what a label keeps.

    s = sketch_of(text, n_messages=2)          # or sketch_of_messages(messages)
    blob = s.to_bytes()                        # about 1-3 KB
    PromptSketch.from_bytes(blob)              # SketchError if malformed or from another featurizer

``routegate learn`` fits on sketches, whether its labels came from a file of
prompts or from the gateway's traffic, where the prompt text is kept only
with ``logging.prompts: true``. A sketch holds:

- the hashed n-grams and markers the model reads (``classifiers/features.py``),
- the shape features of its prior (``classifiers/prior.py``),
- a digest of the text, to split labels by prompt and to merge repeats.

The n-grams are hashed into 2^HASH_BITS buckets, so the text cannot be read
back from them; they are still features of it, which is why labels are kept
per team, under that team's retention. ``from_bytes`` bounds every length,
checks every index and value, and refuses a sketch from another featurizer
(its ``FORMAT`` line names the hash bits and window).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np

from classifiers import features
from classifiers.complexity import conversation_text
from classifiers.prior import shape_features

DIGEST_BYTES = 16
MAX_ENTRIES = 8192           # hashed n-gram entries; the bounded window yields far fewer
N_SHAPE = int(shape_features("x").size)
FORMAT = (f"rg-sketch-1:{features.HASH_BITS}:{features.HEAD_CHARS}:{features.TAIL_CHARS}:"
          f"{features.N_DENSE}:{N_SHAPE}").encode()
_HEAD = struct.Struct("<HII")    # len(FORMAT), n entries, n_words


class SketchError(ValueError):
    """Bytes that are not a sketch this featurizer can learn from."""


@dataclass(frozen=True, slots=True)
class PromptSketch:
    digest: bytes                # blake2b of the text, DIGEST_BYTES long
    feats: features.Features
    shape: np.ndarray            # float64, (N_SHAPE,)

    def to_bytes(self) -> bytes:
        f = self.feats
        return b"".join((
            _HEAD.pack(len(FORMAT), f.indices.size, f.n_words), FORMAT, self.digest,
            f.indices.astype("<u4").tobytes(), f.values.astype("<f4").tobytes(),
            f.dense.astype("<f4").tobytes(), self.shape.astype("<f8").tobytes(),
        ))

    @classmethod
    def from_bytes(cls, blob: bytes) -> PromptSketch:
        if len(blob) < _HEAD.size:
            raise SketchError("a sketch too short for its header")
        n_format, n, n_words = _HEAD.unpack_from(blob)
        at = _HEAD.size
        if blob[at:at + n_format] != FORMAT:
            raise SketchError("a sketch from another featurizer "
                              f"({blob[at:at + min(n_format, 64)]!r}, this one {FORMAT!r})")
        if n > MAX_ENTRIES or n_words > n:
            raise SketchError(f"a sketch with {n} entries ({n_words} words)")
        at += n_format
        sizes = (DIGEST_BYTES, 4 * n, 4 * n, 4 * features.N_DENSE, 8 * N_SHAPE)
        if len(blob) != at + sum(sizes):
            raise SketchError(f"a sketch of {len(blob)} bytes, {at + sum(sizes)} expected")
        parts = []
        for size in sizes:
            parts.append(blob[at:at + size])
            at += size
        digest, raw_idx, raw_val, raw_dense, raw_shape = parts
        indices = np.frombuffer(raw_idx, "<u4").astype(np.int64)
        values = np.frombuffer(raw_val, "<f4").astype(np.float32)
        dense = np.frombuffer(raw_dense, "<f4").astype(np.float32)
        shape = np.frombuffer(raw_shape, "<f8").astype(np.float64)
        if (indices >= features.N_HASH).any():
            raise SketchError("a sketch with an n-gram bucket out of range")
        if not (np.isfinite(values).all() and np.isfinite(dense).all()
                and np.isfinite(shape).all()):
            raise SketchError("a sketch with a non-finite value")
        return cls(digest, features.Features(indices, values, dense, int(n_words)), shape)


def digest_of(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=DIGEST_BYTES).digest()


def sketch_of(text: str, *, n_messages: int = 1, has_tools: bool = False,
              has_response_format: bool = False) -> PromptSketch:
    """The sketch of one prompt; bounded cost, as ``featurize``."""
    feats = features.featurize(text, n_messages=n_messages, has_tools=has_tools,
                               has_response_format=has_response_format)
    return PromptSketch(digest_of(text), feats, shape_features(text))


def sketch_of_messages(messages: list[dict], *, has_tools: bool = False,
                       has_response_format: bool = False) -> PromptSketch:
    """The sketch of an OpenAI-format conversation, read as ``score_messages`` reads it."""
    return sketch_of(conversation_text(messages), n_messages=max(len(messages), 1),
                     has_tools=has_tools, has_response_format=has_response_format)
