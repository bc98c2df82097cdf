"""Open-ended chat prompts with judged outcomes, for an out-of-domain table.

    python -m classifiers.arena DIR > arena_chat.jsonl
    routegate eval --held-out arena_chat.jsonl --pair gpt-4-1106-preview,Mixtral-8x7B-Instruct-v0.1

The shared routing data holds benchmark questions only: no chat. Arena-Bench
v1 (``data/arena-bench-v1`` in the public ``lmarena/arena-hard-auto``
repository, an early version of Arena-Hard) holds 300 first-turn prompts
taken from Chatbot Arena, each answered by 16 models and graded by GPT-4
against a reference answer on a 1–10 scale (``model_judgment/<model>.jsonl``:
``{"question_id", "model", "score"}``). ``DIR`` is that folder as checked out
(``question.jsonl`` and ``model_judgment/``); nothing of it is in this
repository. A grade becomes a score in [0, 1] as (grade − 1) / 9; a missing
or failed grade (-1) is no outcome.

The lines written are in the shared data's format (``prompt``, ``task``,
``source``, ``scores``) that ``routegate eval --held-out`` reads. They are
for measuring only: nothing trains on them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SOURCE = "arena-bench-v1"
TASK = "chat"
MAX_GRADE = 10.0


def _grade(obj: dict[str, Any]) -> float | None:
    grade = obj.get("score")
    if isinstance(grade, bool) or not isinstance(grade, (int, float)):
        return None
    if not 1.0 <= grade <= MAX_GRADE:
        return None
    return (float(grade) - 1.0) / (MAX_GRADE - 1.0)


def _short(model: str) -> str:
    return model.rsplit("/", 1)[-1]   # "mistralai/Mixtral-8x7B-Instruct-v0.1" -> its name


def arena_rows(directory: Path) -> list[dict[str, Any]]:
    """One routing-format row per question with at least one grade, in question order."""
    prompts: dict[str, str] = {}
    with open(directory / "question.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = json.loads(line)
                prompts[str(q["question_id"])] = str(q["turns"][0])
    scores: dict[str, dict[str, float]] = {}
    for path in sorted((directory / "model_judgment").glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                obj = json.loads(line) if line.strip() else {}
                score, qid = _grade(obj), str(obj.get("question_id"))
                if score is not None and obj.get("model") and qid in prompts:
                    scores.setdefault(qid, {})[_short(str(obj["model"]))] = score
    return [{"id": qid, "source": SOURCE, "task": TASK, "prompt": prompt, "scores": scores[qid]}
            for qid, prompt in prompts.items() if qid in scores]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not (Path(args[0]) / "question.jsonl").is_file():
        print("usage: python -m classifiers.arena DIR   (DIR: data/arena-bench-v1 of "
              "lmarena/arena-hard-auto, with question.jsonl and model_judgment/)",
              file=sys.stderr)
        return 2
    for row in arena_rows(Path(args[0])):
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
