"""Label files for ``routegate learn``: who answered which prompt how well.

    labels = read_labels("labels.jsonl")      # {"prompt", "model", "score"} per line
    train, held = labels.split(0.5, seed=0)   # by prompt: a prompt is on one side only

One JSON object per line: ``prompt`` (a string, or ``messages`` in the OpenAI
format), ``model`` (any name: the shipped model need not know it) and
``score`` in [0, 1] (1: that model's answer was right, or preferred). A prompt
may appear on many lines, once per model that answered it. Bounded: at most
``MAX_LINES`` lines, ``MAX_MODELS`` model names; each prompt is sketched whole, as
the gateway sketches it when it serves it, and what is kept of its text for the
static embedding is at most ``MAX_PROMPT_CHARS``, its head and its last
``TAIL_CHARS`` (``kept_text``: what the featurizer and the embedding read).
A bad line is an error naming its line number, not skipped: labels are money.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import orjson

from classifiers.complexity import conversation_text
from classifiers.sketch import PromptSketch, digest_of, sketch_of

if TYPE_CHECKING:
    import scipy.sparse as sp

MAX_LINES = 500_000
MAX_MODELS = 64
MAX_PROMPT_CHARS = 20_000
TAIL_CHARS = 2_000          # past the featurizer's and the static embedding's tails
MAX_LINE_BYTES = 4 * 1024 * 1024   # one label line (a prompt or its messages, as JSON)


class LabelError(ValueError):
    """A label file that cannot be learned from; the message names the line."""


@dataclass(frozen=True, slots=True)
class Labels:
    prompts: list[PromptSketch]   # distinct prompts, as the model reads them
    names: list[str]          # distinct model names, in first-seen order
    prompt: np.ndarray        # per label: index into prompts
    model: np.ndarray         # per label: index into names
    score: np.ndarray         # per label: in [0, 1]

    def __len__(self) -> int:
        return int(self.score.size)

    def split(self, held_fraction: float, seed: int = 0,
              fitted: Collection[bytes] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Boolean masks over prompts (train, held out), by a hash of each
        prompt's text and the seed: the same labels always split the same way.
        A prompt in ``fitted`` (digests the current classifier was fitted on)
        is never held out: it would score the current one in-sample."""
        cut = int(held_fraction * 2**32)
        held = np.asarray([_bucket(p.digest, seed) < cut and p.digest not in fitted
                           for p in self.prompts], dtype=bool)
        return ~held, held

    def strong_weak(self) -> tuple[int, int]:
        """(strong, weak): the pair the held-out APGR and ``difficulty`` compare.
        Of the pairs of models that scored apart on prompts both answered, the
        one with the most such prompts (ties: the wider gap there), the better
        of the two there being strong. Means over all of a model's labels would
        mislead on traffic: the router sends the easy prompts to the cheap model,
        and a model shadowed a few times may have any mean. Without such a pair,
        the highest and the lowest mean score overall."""
        answered, mean = self._per_prompt()
        shared = (answered.T @ answered).toarray()         # prompts both answered
        score = (mean.T @ answered).toarray()   # [i, j]: i's scores where j answered too
        gap = np.divide(score - score.T, shared, out=np.zeros_like(shared),
                        where=shared > 0)
        pairs = [(float(shared[i, j]), float(abs(gap[i, j])), int(i), int(j))
                 for i, j in zip(*np.triu_indices(len(self.names), 1), strict=True)
                 if abs(gap[i, j]) > 1e-12]
        if pairs:
            _, _, a, b = max(pairs, key=lambda pair: pair[:2])
            return (a, b) if gap[a, b] > 0 else (b, a)
        means = [float(self.score[self.model == j].mean()) if (self.model == j).any() else 0.0
                 for j in range(len(self.names))]
        return int(np.argmax(means)), int(np.argmin(means))

    def pair_scores(self, prompts: np.ndarray, strong: int, weak: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prompt indices, strong's score, weak's score) for the prompts among
        ``prompts`` (a mask) that both answered; repeated labels are averaged."""
        answered, mean = self._per_prompt()
        pair = [strong, weak]
        keep = prompts & (answered[:, pair].toarray() > 0).all(axis=1)
        index = np.flatnonzero(keep)
        scores = mean[:, pair].toarray()[index]
        return index, scores[:, 0], scores[:, 1]

    def _per_prompt(self) -> tuple[sp.csc_matrix, sp.csc_matrix]:
        """(1 where a model answered a prompt, its mean score there), prompts by
        models; repeated labels are averaged."""
        import scipy.sparse as sp  # learning only (the lab extra): serving never reads this

        size = (len(self.prompts), len(self.names))
        answered = sp.csc_matrix((np.ones_like(self.score), (self.prompt, self.model)),
                                 shape=size)
        sums = sp.csc_matrix((self.score, (self.prompt, self.model)), shape=size)
        mean = sp.csc_matrix(sums.multiply(answered.power(-1)))
        answered.data[:] = 1.0
        return answered, mean


def _bucket(prompt_digest: bytes, seed: int) -> int:
    digest = hashlib.blake2b(prompt_digest, digest_size=4, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "big")


def _prompt_of(obj: dict, line_no: int) -> tuple[str, int]:
    if "messages" in obj:
        messages = obj["messages"]
        if not isinstance(messages, list) or not messages:
            raise LabelError(f"line {line_no}: messages must be a non-empty list")
        text, n_messages = conversation_text(messages), len(messages)
    else:
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            raise LabelError(f"line {line_no}: missing string field 'prompt' (or 'messages')")
        text, n_messages = prompt, 1
    if not text.strip():
        raise LabelError(f"line {line_no}: the prompt is empty")
    return text, n_messages


def kept_text(text: str) -> str:
    """What is kept of a prompt's text: all of it within ``MAX_PROMPT_CHARS``, else its
    head and its last ``TAIL_CHARS``, so that what reads a prompt's end reads this one's."""
    if len(text) <= MAX_PROMPT_CHARS:
        return text
    return text[:MAX_PROMPT_CHARS - TAIL_CHARS] + text[-TAIL_CHARS:]


class LabelSet:
    """Labels as they are read, one at a time; ``build()`` checks and freezes them."""

    def __init__(self) -> None:
        self._index: dict[bytes, int] = {}
        self._prompts: list[PromptSketch] = []
        self._names: dict[str, int] = {}
        self._rows: list[tuple[int, int, float]] = []

    def add(self, digest: bytes, sketch: Callable[[], PromptSketch], model: str, score: float,
            where: str) -> None:
        """One label; ``sketch`` is called once per distinct prompt ``digest``."""
        if len(self._rows) >= MAX_LINES:
            raise LabelError(f"over {MAX_LINES} labels; split them")
        if model not in self._names and len(self._names) >= MAX_MODELS:
            raise LabelError(f"{where}: over {MAX_MODELS} model names")
        if digest not in self._index:
            self._index[digest] = len(self._prompts)
            self._prompts.append(sketch())
        self._rows.append((self._index[digest], self._names.setdefault(model, len(self._names)),
                           score))

    def build(self) -> Labels:
        if not self._rows:
            raise LabelError("no labels")
        if len(self._names) < 2:
            raise LabelError("labels of at least two models are needed to learn who is needed "
                             f"when (only {next(iter(self._names))!r})")
        p, m, s = zip(*self._rows, strict=True)
        return Labels(self._prompts, list(self._names), np.asarray(p), np.asarray(m),
                      np.asarray(s, dtype=np.float64))


def check_label(model: object, score: object, where: str) -> tuple[str, float]:
    """(model, score) of one label, or a LabelError naming ``where``."""
    if not isinstance(model, str) or not model or len(model) > 200:
        raise LabelError(f"{where}: 'model' must be a non-empty string of at most 200 "
                         "characters")
    return model, check_score(score, f"{where}: 'score'")


def check_score(score: object, what: str) -> float:
    """A score in [0, 1] (a JSON number, not a boolean), or a LabelError naming ``what``."""
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        raise LabelError(f"{what} must be a number in [0, 1], got {score!r}")
    return float(score)


def json_object(line: bytes | str, where: str) -> dict[str, Any]:
    """One JSON-lines record, or a LabelError naming ``where``."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise LabelError(f"{where}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise LabelError(f"{where}: not a JSON object")
    return obj


def bounded_lines(fh: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes | None]:
    """A binary file's lines, None in place of one over ``limit`` bytes: that one
    is read past in pieces, never held whole (label, held-out and classify input)."""
    while line := fh.readline(limit + 1):
        if len(line) <= limit or (len(line) == limit + 1 and line.endswith(b"\n")):
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = fh.readline(limit + 1)
        yield None


def parse_labels(lines: Iterable[bytes | None]) -> Labels:
    """``lines`` as ``bounded_lines`` gives them (None: a line over the cap)."""
    labels = LabelSet()
    for line_no, line in enumerate(lines, 1):
        if line is None:
            raise LabelError(f"line {line_no}: over {MAX_LINE_BYTES:,} bytes")
        if not line.strip():
            continue
        obj = json_object(line, f"line {line_no}")
        text, n_messages = _prompt_of(obj, line_no)
        model, score = check_label(obj.get("model"), obj.get("score"), f"line {line_no}")
        kept = kept_text(text)
        labels.add(digest_of(kept), partial(sketch_of, kept, n_messages=n_messages,
                                            n_chars=len(text)),
                   model, score, f"line {line_no}")
    return labels.build()


def prompt_texts(path: str | Path) -> dict[bytes, str]:
    """Each distinct prompt's text by its digest (what ``Labels.prompts`` keep),
    for a label file ``read_labels`` accepted."""
    out: dict[bytes, str] = {}
    with open(path, "rb") as fh:
        for line_no, line in enumerate(fh, 1):
            if line.strip():
                text = kept_text(_prompt_of(orjson.loads(line), line_no)[0])
                out.setdefault(digest_of(text), text)
    return out


def read_labels(path: str | Path) -> Labels:
    """The file's labels, read a line at a time: a line past ``MAX_LINE_BYTES`` is
    an error as soon as it is met, never held whole."""
    with open(path, "rb") as fh:
        return parse_labels(bounded_lines(fh))
