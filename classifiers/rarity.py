"""How rare a prompt's words are: a domain-free difficulty signal for the prior.

    table = build_table()                       # training only: wordfreq's English list
    rarity_features(feats, table)               # RARITY_NAMES, from the unigram buckets

A question made of everyday words ("what is the capital of france") asks
for common knowledge; one with a rare word ("gremolata", "dijkstra", "a
fibonacci heap") asks for a specialist's. Across the training tasks, rarer
words mark the harder task, which is what the prior needs for a prompt
unlike any of them (``classifiers/prior.py``). Within one task the signal
is weak, so the prior takes it between tasks (``fit_prior``'s ``between``).

The table maps each unigram hash bucket of the featurizer
(``classifiers/features.py``) to the Zipf frequency (log10 of uses per
billion words) of the commonest of ``TABLE_WORDS`` English words in that
bucket, from the ``wordfreq`` package (Apache-2.0, its data CC-BY-SA 4.0,
installed at training time only). It ships inside the artifact as one byte
per bucket, so serving needs no word list and reads only the buckets the
model already computed: a gather over a prompt's unigrams, and labels kept
as sketches (``classifiers/sketch.py``) have it too. A bucket with no listed
word reads as unknown, the rarest; punctuation and numbers are skipped.
"""

from __future__ import annotations

import numpy as np

from classifiers import features

TABLE_WORDS = 100_000            # wordfreq's commonest English words (Zipf >= 1.96)
SCALE = 20.0                     # one byte per bucket: Zipf * SCALE, 0 = unknown
SKIP = 255                       # punctuation and numbers: not words
MAX_ZIPF = 7.0                   # "the" is 7.7: rarity 0 at and above this
RARE_ZIPF = 3.0                  # under about 3 uses per million words
RARITY_NAMES: tuple[str, ...] = ("rarest_word", "rarest_three", "rare_share")
_NUMBERS = 10_000                # "0" .. "9999" are skipped unless a listed word shares the bucket


def build_table(n_words: int = TABLE_WORDS) -> tuple[np.ndarray, dict[str, str]]:
    """(one byte per unigram bucket, provenance); needs the ``wordfreq`` package."""
    import wordfreq  # training only

    table = np.zeros(features.N_HASH, dtype=np.uint8)
    for number in range(_NUMBERS):
        table[features.unigram_bucket(str(number))] = SKIP
    for word in wordfreq.top_n_list("en", n_words):
        bucket = features.unigram_bucket(word)
        if bucket is None:
            continue   # "don't" is three featurizer tokens: its pieces are listed words
        code = max(min(int(round(wordfreq.zipf_frequency(word, "en") * SCALE)), SKIP - 1), 1)
        if table[bucket] == SKIP or code > table[bucket]:
            table[bucket] = code   # the commonest word of a bucket speaks for it
    for byte in range(33, 127):   # punctuation is commoner than any word sharing its bucket
        if not (chr(byte).isalnum() or chr(byte) == "_"):
            table[features.unigram_bucket(chr(byte))] = SKIP
    provenance = {"source": "wordfreq", "version": _version("wordfreq"), "language": "en",
                  "words": str(n_words)}
    return table, provenance


def rarity_features(feats: features.Features, table: np.ndarray) -> np.ndarray:
    """RARITY_NAMES in [0, 1]: the rarest word, the mean of the three rarest, the
    share of words under RARE_ZIPF; zeros for a prompt with no word at all."""
    codes = table.take(feats.indices[:feats.n_words])
    codes = codes[codes != SKIP]
    if codes.size == 0:
        return np.zeros(len(RARITY_NAMES), dtype=np.float64)
    zipf = codes.astype(np.float64) / SCALE
    rarity = np.clip((MAX_ZIPF - zipf) / MAX_ZIPF, 0.0, 1.0)
    top = np.partition(rarity, rarity.size - 3)[-3:] if rarity.size > 3 else rarity
    return np.asarray((rarity.max(), top.mean(), float(np.mean(zipf < RARE_ZIPF))))


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)
