"""Open-ended chat prompts with judged outcomes, for an out-of-domain table.

    python -m lab.arena DIR > arena_chat.jsonl
    routegate eval --held-out arena_chat.jsonl --pair gpt-4-1106-preview,Mixtral-8x7B-Instruct-v0.1
    python -m lab.arena fastchat/eval/table > vicuna_chat.jsonl
    routegate eval --held-out vicuna_chat.jsonl --pair gpt35@vicuna-13b,vicuna-13b@gpt35

The shared routing data holds benchmark questions only: no chat. Arena-Bench
v1 (``data/arena-bench-v1`` in the public ``lmarena/arena-hard-auto``
repository, an early version of Arena-Hard) holds 300 first-turn prompts
taken from Chatbot Arena, each answered by 16 models and graded by GPT-4
against a reference answer on a 1–10 scale (``model_judgment/<model>.jsonl``:
``{"question_id", "model", "score"}``). ``DIR`` is that folder as checked out
(``question.jsonl`` and ``model_judgment/``); nothing of it is in this
repository. A grade becomes a score in [0, 1] as (grade − 1) / 9; a missing
or failed grade (-1) is no outcome.

``DIR`` may instead be ``fastchat/eval/table`` of the public
``lm-sys/FastChat`` repository as of commit 6ed0394d (the Vicuna benchmark,
later removed there): 80 short first-turn questions in nine categories
(``question.jsonl``: ``{"question_id", "text", "category"}``), seven models'
answers (``answer/answer_<model>.jsonl``) and GPT-4's reviews of two answers
at a time (``review/<dir>/review_<a>_<b>.jsonl``: ``"score": [a's, b's]``,
1–10). Two grades are comparable only within one review, so a model's grade
is named by its opponent there: ``gpt35@vicuna-13b`` is gpt35's grade in its
reviews against vicuna-13b, and a pair is ``gpt35@vicuna-13b,vicuna-13b@gpt35``.
The category is the row's task. Reviews by gpt-3.5-turbo (the folders named
``gpt-3.5-turbo_review*``) are left out.

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
VICUNA_SOURCE = "vicuna-bench"
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


def _review_grades(path: Path, model_of: dict[str, str]) -> list[tuple[str, str, float]]:
    """(question id, model@opponent, score) of each usable grade in one review file."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            review = json.loads(line) if line.strip() else {}
            first, second = (model_of.get(str(review.get(k))) for k in ("answer1_id", "answer2_id"))
            grades = review.get("score")
            if not (first and second and isinstance(grades, list) and len(grades) == 2):
                continue
            for model, opponent, grade in ((first, second, grades[0]), (second, first, grades[1])):
                score = _grade({"score": grade})
                if score is not None:
                    out.append((str(review.get("question_id")), f"{model}@{opponent}", score))
    return out


def vicuna_rows(table: Path) -> list[dict[str, Any]]:
    """One routing-format row per Vicuna-benchmark question with a grade, in question order."""
    questions: dict[str, dict[str, Any]] = {}
    with open(table / "question.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = json.loads(line)
                questions[str(q["question_id"])] = q
    model_of: dict[str, str] = {}   # answer id -> the answer file's model name
    for path in sorted((table / "answer").glob("answer_*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    model_of[str(json.loads(line)["answer_id"])] = path.stem[len("answer_"):]
    scores: dict[str, dict[str, float]] = {}
    for path in sorted((table / "review").glob("*/review_*.jsonl")):
        if not path.parent.name.startswith("gpt-3.5-turbo_review"):   # GPT-4's reviews only
            for qid, model, score in _review_grades(path, model_of):
                if qid in questions:
                    scores.setdefault(qid, {})[model] = score
    return [{"id": qid, "source": VICUNA_SOURCE, "task": str(q.get("category") or TASK),
             "prompt": str(q["text"]), "scores": scores[qid]}
            for qid, q in questions.items() if qid in scores]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if len(args) == 1 else None
    if folder is None or not (folder / "question.jsonl").is_file():
        print("usage: python -m lab.arena DIR   (DIR: data/arena-bench-v1 of "
              "lmarena/arena-hard-auto, with question.jsonl and model_judgment/; or "
              "fastchat/eval/table of lm-sys/FastChat at 6ed0394d, with review/)",
              file=sys.stderr)
        return 2
    rows = vicuna_rows(folder) if (folder / "review").is_dir() else arena_rows(folder)
    for row in rows:
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
