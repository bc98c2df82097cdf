"""Public per-question outcomes of other benchmarks, for the out-of-domain table.

    python -m lab.public_sets mmlu-pro DIR > mmlupro_stem.jsonl
    routegate eval --held-out mmlupro_stem.jsonl --pair gemini-1.5-pro-002,Mixtral-8x7B-Instruct-v0.1
    python -m lab.public_sets bbh-date DIR > bbh_date.jsonl
    routegate eval --held-out bbh_date.jsonl --pair gpt-4,llama-2-13b

The chat tables (``lab/arena.py``) say nothing about multiple-choice
knowledge or short reasoning. Two public repositories keep every model's
answer to every question, from which these are read:

- ``mmlu-pro``: MMLU-Pro's own evaluation outputs (the public
  ``TIGER-AI-Lab/MMLU-Pro`` repository, Apache-2.0, ``eval_results/``: one
  ``model_outputs_<model>_5shots.zip`` per model). ``DIR`` holds the unzipped
  JSON files, lists of ``{"question_id", "question", "options", "answer",
  "pred", "category", "src"}``. A model scores 1 where ``pred`` equals the
  answer (no prediction: 0). Ten-option questions in 14 subjects; the rows
  from MMLU's own test set (``src`` starting ``ori_mmlu``) are left out unless
  ``--keep-mmlu``, since MMLU is a held-out check of this project, leaving
  those taken from STEM web sites, TheoremQA and SciBench. The row's task is
  its source (``stemez``, ``theoremQA``, ``scibench``).
- ``bbh-date``: BIG-Bench Hard's date understanding, 369 questions answered
  with chain of thought by GPT-4 (greedy), gpt-3.5-turbo and Llama-2-13B (20
  samples each) in the public ``MurongYue/LLM_MoT_cascade`` repository (no
  licence file; read, not copied). ``DIR`` is its checkout, with
  ``GPT4_result/date_greedy_cot1.json``, ``GPT3_result/date_cot1.json`` and
  ``llama2_13B_result/date_cot1.json``. A score is the share of a model's
  samples whose answer is the gold one.

Nothing here is copied into the repository, and nothing trains on these
lines: they measure, in the shared data's format that ``routegate eval
--held-out`` reads.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MMLU_PRO_FILE = re.compile(r"model_outputs_(.+)_5shots\.json$")
LETTERS = "ABCDEFGHIJ"
BBH_DATE_FILES = {   # model name -> file in the LLM_MoT_cascade checkout
    "gpt-4": "GPT4_result/date_greedy_cot1.json",
    "gpt-3.5-turbo": "GPT3_result/date_cot1.json",
    "llama-2-13b": "llama2_13B_result/date_cot1.json",
}


def _options(value: Any) -> list[str]:
    if isinstance(value, str):   # some files keep the list as its Python repr
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return [value]
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def mmlu_pro_rows(folder: Path, keep_mmlu: bool = False) -> Iterator[dict[str, Any]]:
    """One routing-format row per question, with the score of every model that answered it."""
    questions: dict[str, dict[str, Any]] = {}
    scores: dict[str, dict[str, float]] = {}
    files = sorted(p for p in folder.iterdir() if MMLU_PRO_FILE.match(p.name))
    if not files:
        raise ValueError(f"{folder}: no model_outputs_<model>_5shots.json files in it")
    for path in files:
        model = MMLU_PRO_FILE.match(path.name).group(1)   # type: ignore[union-attr]
        for item in json.loads(path.read_text()):
            if not isinstance(item, dict) or "question_id" not in item:
                continue
            qid = str(item["question_id"])
            if not keep_mmlu and str(item.get("src", "")).startswith("ori_mmlu"):
                continue
            questions.setdefault(qid, item)
            correct = item.get("pred") is not None and item.get("pred") == item.get("answer")
            scores.setdefault(qid, {})[model] = 1.0 if correct else 0.0
    for qid in sorted(questions, key=lambda q: (len(q), q)):
        item = questions[qid]
        options = "\n".join(f"({LETTERS[i]}) {o}"
                            for i, o in enumerate(_options(item.get("options"))[:len(LETTERS)]))
        yield {"prompt": f"{item['question']}\n{options}", "source": "mmlu-pro",
               "task": str(item.get("src", "")).split("-", 1)[0], "scores": scores[qid]}


def _answer(value: Any) -> str:
    """The gold answer: a string, or the option marked 1 in a dict (or its repr)."""
    if isinstance(value, str) and value.startswith("{"):
        value = ast.literal_eval(value)
    if isinstance(value, dict):
        value = next(k for k, v in value.items() if v == 1)
    return str(value).strip()


def _same(a: str, b: str) -> bool:
    try:
        return abs(float(a.replace(",", "")) - float(b.replace(",", ""))) < 1e-4
    except ValueError:
        return a.strip() == b.strip()


def _sample_score(item: dict[str, Any]) -> float:
    results = item.get("results")
    if isinstance(results, str):
        results = ast.literal_eval(results)
    if not results:
        return 0.0
    gold = _answer(item["answer"])
    return sum(_same(str(r), gold) for r in results) / len(results)


def bbh_date_rows(checkout: Path) -> Iterator[dict[str, Any]]:
    """One row per question, every model's share of correct samples."""
    answers = {m: json.loads((checkout / f).read_text()) for m, f in BBH_DATE_FILES.items()}
    n = min(len(a) for a in answers.values())
    for i in range(n):
        question = {a[i]["question"] for a in answers.values()}
        if len(question) != 1:
            raise ValueError(f"{checkout}: question {i} differs between the models' files")
        yield {"prompt": question.pop(), "source": "bbh", "task": "date_understanding",
               "scores": {m: _sample_score(a[i]) for m, a in answers.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.public_sets",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("set", choices=("mmlu-pro", "bbh-date"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--keep-mmlu", action="store_true",
                        help="mmlu-pro: keep the questions taken from MMLU's test set")
    args = parser.parse_args(argv)
    try:
        rows = (mmlu_pro_rows(args.dir, args.keep_mmlu) if args.set == "mmlu-pro"
                else bbh_date_rows(args.dir))
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        print(f"lab.public_sets: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
