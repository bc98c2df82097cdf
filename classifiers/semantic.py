"""Static word embeddings (``wordllama``) as prompt features, loaded offline from the package.

    embedder = load_embedder()                     # raises SemanticUnavailable without it
    embedder.embed_many(prompts)                   # (n, 256): training design columns
    scorer = embedder.scorer(semantic_w)           # inference: one scalar per prompt
    scorer(text)                                   # == embed(text) @ semantic_w

wordllama ships a 32,000 x 256 token embedding table and its tokenizer in the
wheel; a prompt's embedding is the mean of its tokens' rows. Its loader
looks for the tokenizer under ``tokenizer/`` while the wheel has it under
``wordllama/tokenizers/``, so ``load_embedder`` copies that one file into a
temporary cache directory and loads with ``disable_download=True``: nothing
is ever fetched, and a missing package or file is an error, not a download.

Inference needs no 256-d vector: a linear function of a mean of rows is the
mean of a per-token scalar, so ``scorer`` projects the table once at load
(``table @ w``) and a request costs a tokenization and a gather. The
tokenizer is the slow part (about 0.3 us per character), so only a bounded
head and tail of the prompt are embedded (``SEMANTIC_HEAD``/``SEMANTIC_TAIL``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("routegate.classifier")

WORDLLAMA_CONFIG = "l2_supercat"
SEMANTIC_DIM = 256
SEMANTIC_HEAD = 384  # characters embedded from the start of the prompt
SEMANTIC_TAIL = 128  # ... and from its end (what is asked)


class SemanticUnavailable(RuntimeError):
    """wordllama or its packaged files cannot be loaded (never downloaded instead)."""


def semantic_window(text: str) -> str:
    """Head and tail of ``text`` that the embedding looks at (bounded tokenizer cost)."""
    if len(text) <= SEMANTIC_HEAD + SEMANTIC_TAIL:
        return text
    return text[:SEMANTIC_HEAD] + " " + text[-SEMANTIC_TAIL:]


@dataclass(frozen=True, slots=True)
class Embedder:
    """wordllama's tokenizer and token table (float32, vocabulary x SEMANTIC_DIM)."""

    tokenizer: Any  # tokenizers.Tokenizer
    table: np.ndarray

    def token_ids(self, text: str) -> np.ndarray:
        ids = self.tokenizer.encode(semantic_window(text), add_special_tokens=False).ids
        return np.clip(np.asarray(ids, dtype=np.int64), 0, self.table.shape[0] - 1)

    def embed(self, text: str) -> np.ndarray:
        """Mean token vector of the prompt's window; zeros for an empty prompt."""
        ids = self.token_ids(text)
        if ids.size == 0:
            return np.zeros(self.table.shape[1], dtype=np.float64)
        return self.table[ids].mean(axis=0, dtype=np.float64)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        return np.vstack([self.embed(t) for t in texts]) if texts else np.zeros((0, SEMANTIC_DIM))

    def scorer(self, weights: np.ndarray) -> Callable[[str], float]:
        """``text -> embed(text) @ weights``, as a per-token gather (see module docstring)."""
        per_token = (self.table.astype(np.float64) @ weights).astype(np.float64)

        def score(text: str) -> float:
            ids = self.token_ids(text)
            return float(per_token[ids].mean()) if ids.size else 0.0

        return score


@lru_cache(maxsize=1)
def load_embedder() -> Embedder:
    """wordllama's table and tokenizer from the installed wheel; never downloads.

    Cached: the table is read-only, and every model built in one process
    (the hold-out loops) shares it.
    """
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError as exc:
        raise SemanticUnavailable(f"wordllama is not installed ({exc})") from exc
    package = Path(wordllama.__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="routegate-wordllama-") as cache:
        try:
            for source in (package / "tokenizers").glob("*.json"):
                (Path(cache) / "tokenizers").mkdir(exist_ok=True)
                shutil.copy(source, Path(cache) / "tokenizers" / source.name)
            model = WordLlama.load(WORDLLAMA_CONFIG, cache_dir=cache, disable_download=True,
                                   dim=SEMANTIC_DIM)
        except (OSError, ValueError, KeyError) as exc:
            raise SemanticUnavailable(f"wordllama files not found in {package} ({exc})") from exc
    return Embedder(tokenizer=model.tokenizer, table=np.asarray(model.embedding, dtype=np.float32))


def semantic_meta(training_mean: float) -> dict[str, Any]:
    """What an artifact records of the embedding; ``mean`` is the fallback value."""
    return {"wordllama": WORDLLAMA_CONFIG, "dim": SEMANTIC_DIM, "head_chars": SEMANTIC_HEAD,
            "tail_chars": SEMANTIC_TAIL, "mean": round(training_mean, 9)}


def semantic_term(weights: np.ndarray, meta: dict[str, Any],
                  embedder: Embedder | None) -> Callable[[str], float]:
    """The artifact's semantic contribution to d(x); its training mean without wordllama."""
    expected = semantic_meta(0.0) | {"mean": meta.get("mean")}
    if meta != expected:
        raise ValueError(f"artifact was trained with semantic={meta!r}, "
                         f"featurizer has {expected!r}; retrain with `routegate train`")
    if embedder is None:
        mean = float(meta["mean"])
        return lambda text: mean
    return embedder.scorer(weights)


def try_load_embedder() -> Embedder | None:
    """``load_embedder`` or ``None`` with a warning (the caller falls back)."""
    try:
        return load_embedder()
    except SemanticUnavailable as exc:
        logger.warning("semantic features unavailable: %s; the classifier uses their "
                       "training mean instead (pip install 'routegate[semantic]')", exc)
        return None
