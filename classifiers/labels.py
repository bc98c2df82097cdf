"""Label files for ``routegate learn``: who answered which prompt how well.

    labels = read_labels("labels.jsonl")      # {"prompt", "model", "score"} per line
    train, held = labels.split(0.5, seed=0)   # by prompt: a prompt is on one side only

One JSON object per line: ``prompt`` (a string, or ``messages`` in the OpenAI
format), ``model`` (any name: the shipped model need not know it) and
``score`` in [0, 1] (1: that model's answer was right, or preferred). A prompt
may appear on many lines, once per model that answered it. Bounded: at most
``MAX_LINES`` lines, ``MAX_MODELS`` model names, and each prompt's text is cut
to ``MAX_PROMPT_CHARS`` (the featurizer reads only its head and tail anyway).
A bad line is an error naming its line number, not skipped: labels are money.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from classifiers.complexity import conversation_text

MAX_LINES = 500_000
MAX_MODELS = 64
MAX_PROMPT_CHARS = 20_000


class LabelError(ValueError):
    """A label file that cannot be learned from; the message names the line."""


@dataclass(frozen=True, slots=True)
class Labels:
    prompts: list[str]        # distinct prompt texts
    names: list[str]          # distinct model names, in first-seen order
    prompt: np.ndarray        # per label: index into prompts
    model: np.ndarray         # per label: index into names
    score: np.ndarray         # per label: in [0, 1]

    def __len__(self) -> int:
        return int(self.score.size)

    def split(self, held_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Boolean masks over prompts (train, held out), by a hash of each
        prompt's text and the seed: the same file always splits the same way."""
        cut = int(held_fraction * 2**32)
        held = np.asarray([_bucket(p, seed) < cut for p in self.prompts], dtype=bool)
        return ~held, held

    def strong_weak(self) -> tuple[int, int]:
        """The names with the highest and the lowest mean score."""
        means = [float(self.score[self.model == j].mean()) if (self.model == j).any() else 0.0
                 for j in range(len(self.names))]
        return int(np.argmax(means)), int(np.argmin(means))

    def pair_scores(self, prompts: np.ndarray, strong: int, weak: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prompt indices, strong's score, weak's score) for the prompts among
        ``prompts`` (a mask) that both answered; repeated labels are averaged."""
        both = []
        for j in (strong, weak):
            sums = np.zeros(len(self.prompts))
            counts = np.zeros(len(self.prompts))
            on = self.model == j
            np.add.at(sums, self.prompt[on], self.score[on])
            np.add.at(counts, self.prompt[on], 1.0)
            both.append((sums, counts))
        keep = prompts & (both[0][1] > 0) & (both[1][1] > 0)
        index = np.flatnonzero(keep)
        return (index, both[0][0][index] / both[0][1][index],
                both[1][0][index] / both[1][1][index])


def _bucket(text: str, seed: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{text}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def _prompt_of(obj: dict, line_no: int) -> str:
    if "messages" in obj:
        messages = obj["messages"]
        if not isinstance(messages, list) or not messages:
            raise LabelError(f"line {line_no}: messages must be a non-empty list")
        text = conversation_text(messages)
    else:
        prompt = obj.get("prompt")
        if not isinstance(prompt, str):
            raise LabelError(f"line {line_no}: missing string field 'prompt' (or 'messages')")
        text = prompt
    if not text.strip():
        raise LabelError(f"line {line_no}: the prompt is empty")
    return text[:MAX_PROMPT_CHARS]


def _label_of(obj: dict, line_no: int) -> tuple[str, float]:
    model, score = obj.get("model"), obj.get("score")
    if not isinstance(model, str) or not model or len(model) > 200:
        raise LabelError(f"line {line_no}: 'model' must be a non-empty string")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        raise LabelError(f"line {line_no}: 'score' must be a number in [0, 1], got {score!r}")
    return model, float(score)


def parse_labels(lines: Sequence[bytes]) -> Labels:
    prompts: dict[str, int] = {}
    names: dict[str, int] = {}
    rows: list[tuple[int, int, float]] = []
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(rows) >= MAX_LINES:
            raise LabelError(f"over {MAX_LINES} labels; split the file")
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LabelError(f"line {line_no}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise LabelError(f"line {line_no}: not a JSON object")
        text = _prompt_of(obj, line_no)
        model, score = _label_of(obj, line_no)
        if model not in names and len(names) >= MAX_MODELS:
            raise LabelError(f"line {line_no}: over {MAX_MODELS} model names")
        rows.append((prompts.setdefault(text, len(prompts)),
                     names.setdefault(model, len(names)), score))
    if not rows:
        raise LabelError("no labels")
    if len(names) < 2:
        raise LabelError("labels of at least two models are needed to learn who is needed "
                         f"when (only {next(iter(names))!r})")
    p, m, s = zip(*rows, strict=True)
    return Labels(list(prompts), list(names), np.asarray(p), np.asarray(m),
                  np.asarray(s, dtype=np.float64))


def read_labels(path: str | Path) -> Labels:
    with open(path, "rb") as fh:
        return parse_labels(fh.readlines())
