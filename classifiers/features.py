"""Prompt featurizer shared by training and inference.

    feats = featurize("Write a function to reverse a list.", n_messages=1)
    feats.indices, feats.values   # sparse hashed n-grams (duplicates allowed: they add up)
    feats.dense                   # DENSE_NAMES, fixed order

The same function builds the training design matrix and scores live requests,
so the two can never drift apart.

Bounded cost: n-grams and markers are taken from at most ``HEAD_CHARS`` chars
at the start plus ``TAIL_CHARS`` at the end of the prompt. Long prompts are
usually few-shot examples or pasted documents followed by the actual question,
so the head says what kind of task it is and the tail says what is asked. Only
the length feature looks at the whole text, and ``len()`` is O(1). A 1 MB
prompt therefore costs the same as a 2 kB one.

Hashing is deterministic across processes (Python's ``hash()`` is salted per
process) and vectorised, because a Python loop over words costs more than the
whole latency budget:

- words are maximal runs of ASCII letters, digits, ``_`` or non-ASCII bytes
  (so a run of CJK text is one word); every other non-space byte is a
  one-byte token. A word's hash is a polynomial hash of its UTF-8 bytes,
  read off prefix sums in O(1) per word;
- word bigrams mix the two word hashes; byte 4-grams pack four bytes;
- everything goes through Knuth multiplicative hashing into ``N_HASH`` buckets.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

HASH_BITS = 18
N_HASH = 1 << HASH_BITS
HEAD_CHARS = 1500
TAIL_CHARS = 500

_MASK32 = np.uint64(0xFFFFFFFF)
_KNUTH = np.uint64(2654435761)
_POLY = 0x100000001B3  # FNV prime: odd, so it is invertible modulo 2**64
# Distinct salts keep unigrams, bigrams and byte grams in different bucket orders.
_SALT_UNIGRAM = np.uint64(0x9E3779B9)
_SALT_BIGRAM = np.uint64(0x5BD1E995)
_SALT_BYTES = np.uint64(0x27D4EB2F)

_LATEX_RE = re.compile(r"\\[a-z]+|\$[^$\n]{1,80}\$")
_OPTION_RE = re.compile(r"(?m)^\s*\(?[a-h][\).:]\s|\([a-h]\)\s")
_CODE_WORDS = (
    "def ", "return", "import ", "class ", "lambda", "function", "const ", "void ",
    "#include", "elif ", "print(",
)
_OPERATORS = "=+*/^<>"
_DIGITS = "0123456789"
# Their UTF-8 bytes: an ASCII byte never occurs inside a multi-byte character.
_OPERATOR_BYTES = tuple(_OPERATORS.encode())
_DIGIT_BYTES = slice(ord("0"), ord("9") + 1)

DENSE_NAMES: tuple[str, ...] = (
    "log_tokens",
    "log_messages",
    "has_tools",
    "has_response_format",
    "code_fence",
    "code_keywords",
    "latex",
    "digit_ratio",
    "operator_ratio",
    "mc_options",
    "non_ascii_ratio",
    "cjk_ratio",
    "log_lines",
    "question_marks",
    "answer_markers",
)
N_DENSE = len(DENSE_NAMES)


@dataclass(frozen=True, slots=True)
class Features:
    """Sparse hashed n-grams plus a small dense vector (see ``DENSE_NAMES``)."""

    indices: np.ndarray  # int64 bucket ids in [0, N_HASH)
    values: np.ndarray  # float32, same length as indices
    dense: np.ndarray  # float32, shape (N_DENSE,)
    n_words: int = 0  # indices[:n_words] are word unigrams, the next n_words - 1 bigrams


def bounded_window(text: str) -> str:
    """Head and tail of ``text``; what the n-grams and markers look at."""
    if len(text) <= HEAD_CHARS + TAIL_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]


@lru_cache(maxsize=1)
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Byte classes and powers of the polynomial hash, built once on first use."""
    word = np.zeros(256, dtype=bool)
    for ch in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_":
        word[ch] = True
    word[128:] = True
    space = np.zeros(256, dtype=bool)
    space[list(b" \t\n\r\f\v")] = True
    # A window has at most 4 bytes per char (UTF-8), plus the joining newline.
    n = 4 * (HEAD_CHARS + TAIL_CHARS + 1) + 1
    powers = np.cumprod(np.full(n, _POLY, dtype=np.uint64), dtype=np.uint64)
    inverses = np.cumprod(np.full(n, pow(_POLY, -1, 1 << 64), dtype=np.uint64), dtype=np.uint64)
    powers = np.concatenate([[np.uint64(1)], powers[:-1]])
    inverses = np.concatenate([[np.uint64(1)], inverses[:-1]])
    return word, space, powers, inverses


def byte_classes() -> tuple[np.ndarray, np.ndarray]:
    """(word byte, space byte): ``token_hashes``' byte classes, 256 bools each."""
    word, space, _, _ = _tables()
    return word, space


def token_hashes(raw: np.ndarray) -> np.ndarray:
    """32-bit hashes of the word and punctuation tokens of UTF-8 bytes, in order."""
    word_table, space_table, powers, inverses = _tables()
    n = raw.size
    is_word = word_table[raw]
    # edges[i] is True where byte i starts a token (or ends one, shifted by one).
    starts_mask = np.empty(n, dtype=bool)
    ends_mask = np.empty(n, dtype=bool)
    starts_mask[0:1] = True
    np.not_equal(is_word[1:], is_word[:-1], out=starts_mask[1:])
    ends_mask[-1:] = True
    np.copyto(ends_mask[:-1], starts_mask[1:])
    punct = ~(is_word | space_table[raw])
    starts = np.flatnonzero((starts_mask & is_word) | punct)
    ends = np.flatnonzero((ends_mask & is_word) | punct) + 1  # same order as starts
    # Integer arrays wrap modulo 2**64 silently: that is the hash arithmetic we want.
    prefix = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(raw * powers[:n], out=prefix[1:])
    return ((prefix[ends] - prefix[starts]) * inverses[starts]) & _MASK32


def _ngram_hashes(raw: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Salted 32-bit hashes of word unigrams, word bigrams and byte 4-grams."""
    words = token_hashes(raw)
    bigrams = ((words[:-1] * _KNUTH + words[1:]) & _MASK32) ^ _SALT_BIGRAM
    wide = raw.astype(np.uint64)
    grams = wide[:-3] | (wide[1:-2] << np.uint64(8)) | (wide[2:-1] << np.uint64(16))
    grams = (grams | (wide[3:] << np.uint64(24))) ^ _SALT_BYTES
    counts = (words.size, bigrams.size, grams.size)
    return np.concatenate([words ^ _SALT_UNIGRAM, bigrams, grams]), counts


def unigram_bucket(word: str) -> int | None:
    """The bucket ``featurize`` gives ``word`` (lower-cased) as a unigram; None unless it
    is a single token (a run of word bytes, or one punctuation byte)."""
    raw = np.frombuffer(word.lower().encode("utf-8", "replace"), dtype=np.uint8)
    if raw.size == 0:
        return None
    hashes = token_hashes(raw)
    if hashes.size != 1:
        return None
    salted = (hashes ^ _SALT_UNIGRAM) * _KNUTH & _MASK32
    return int(salted[0] >> np.uint64(32 - HASH_BITS))


def _ngram_features(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    if raw.size < 4:  # too short for any byte 4-gram; tokens alone carry nothing useful
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32), 0
    hashes, counts = _ngram_hashes(raw)
    buckets = ((hashes * _KNUTH) & _MASK32) >> np.uint64(32 - HASH_BITS)
    # 1/sqrt(n) per occurrence within each block: a long prompt does not get a
    # larger dot product just for having more n-grams, yet repeats count more.
    scales = np.array([1.0 / math.sqrt(c) if c else 0.0 for c in counts], dtype=np.float32)
    return buckets.astype(np.int64), np.repeat(scales, counts), counts[0]


def dense_features(
    text: str, lowered: str, raw: np.ndarray, n_messages: int, flags: tuple[bool, bool],
    n_chars: int | None = None,
) -> np.ndarray:
    """Hand-made markers, each scaled to roughly [0, 1] so one L2 penalty fits all.

    ``lowered`` is the lower-cased window and ``raw`` its UTF-8 bytes: counting
    lead bytes there is much cheaper than a per-character regex.
    """
    n = max(len(lowered), 1)
    values = markers(text, lowered, n_messages, flags, n_chars)
    # One pass over the bytes for the digit and operator counts (17 str.count before).
    byte_counts = np.bincount(raw, minlength=256).tolist()
    values[DIGIT_RATIO] = sum(byte_counts[_DIGIT_BYTES]) / n
    values[OPERATOR_RATIO] = sum([byte_counts[b] for b in _OPERATOR_BYTES]) / n
    values[NON_ASCII_RATIO] = int(np.count_nonzero(raw >= 0xC0)) / n  # UTF-8 lead bytes
    values[CJK_RATIO] = int(np.count_nonzero((raw >= 0xE3) & (raw <= 0xED))) / n  # U+3000..
    return np.asarray(values, dtype=np.float32)


# The markers read off the window's bytes (``dense_features``; ``classifiers/kernel.py``).
DIGIT_RATIO, OPERATOR_RATIO, NON_ASCII_RATIO, CJK_RATIO = 7, 8, 10, 11
# The markers that read the window's text (``markers``): the compiled score counts them
# itself on an ASCII window (``classifiers/kernel_strings.py``).
CODE_FENCE, CODE_KEYWORDS, LATEX, MC_OPTIONS, LOG_LINES, QUESTION_MARKS, ANSWER_MARKERS = (
    4, 5, 6, 9, 12, 13, 14)


def log_size(text: str, n_chars: int | None = None) -> float:
    """The prompt's size feature (a marker and a shape feature): log tokens, scaled."""
    return math.log1p((len(text) if n_chars is None else n_chars) / 4.0) / 8.0


def size_markers(text: str, n_messages: int, flags: tuple[bool, bool],
                 n_chars: int | None = None) -> list[float]:
    """The markers that do not read the window (its size, the messages, the flags);
    0.0 for the others."""
    values = [0.0] * N_DENSE
    values[0] = log_size(text, n_chars)
    values[1] = math.log(max(n_messages, 1)) / 3.0
    values[2] = float(flags[0])
    values[3] = float(flags[1])
    return values


def markers(text: str, lowered: str, n_messages: int, flags: tuple[bool, bool],
            n_chars: int | None = None) -> list[float]:
    """``dense_features`` but the four ratios of bytes (0.0 there): the string markers."""
    values = size_markers(text, n_messages, flags, n_chars)
    values[CODE_FENCE] = float("```" in lowered)
    values[CODE_KEYWORDS] = min(sum(map(lowered.count, _CODE_WORDS)), 10) / 10.0
    values[LATEX] = min(len(_LATEX_RE.findall(lowered)), 10) / 10.0
    values[MC_OPTIONS] = min(len(_OPTION_RE.findall(lowered)), 8) / 8.0
    values[LOG_LINES] = math.log1p(lowered.count("\n")) / 5.0
    values[QUESTION_MARKS] = min(lowered.count("?"), 10) / 10.0
    values[ANSWER_MARKERS] = min(lowered.count("answer:") + lowered.count("答案"), 10) / 10.0
    return values


def featurize(
    text: str, *, n_messages: int = 1, has_tools: bool = False, has_response_format: bool = False,
    n_chars: int | None = None,
) -> Features:
    """Features of one prompt; cost is bounded by ``HEAD_CHARS + TAIL_CHARS``. ``n_chars``:
    the whole prompt's length when ``text`` keeps only its head and tail."""
    window = bounded_window(text)
    lowered = window.lower()
    raw = np.frombuffer(lowered.encode("utf-8", "replace"), dtype=np.uint8)
    indices, values, n_words = _ngram_features(raw)
    dense = dense_features(text, lowered, raw, n_messages, (has_tools, has_response_format),
                           n_chars)
    return Features(indices=indices, values=values, dense=dense, n_words=n_words)
