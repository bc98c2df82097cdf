"""``routegate classify``: score prompts with the complexity model, as the gateway does.

    echo '{"id": 1, "prompt": "hi"}' | routegate classify
    echo '{"id": 2, "messages": [...]}' | routegate classify --classifier learned/

The product's (it loads what ``routegate serve`` loads); the lab's commands
(train, eval, calibrate, learn) are in ``lab/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from classifiers.complexity import ComplexityModel
from classifiers.labels import MAX_LINE_BYTES, bounded_lines
from classifiers.length import counter_for

CLASSIFY_BATCH = 2000
MAX_CLASSIFY_LINE = MAX_LINE_BYTES   # one prompt or conversation, as a JSON line


def register_classify(subparsers: Any) -> None:
    classify = subparsers.add_parser(
        "classify", help="score JSON lines from stdin",
        description="Reads JSON lines from stdin, each {\"id\": any, \"prompt\": str} or "
                    "{\"id\": any, \"messages\": [OpenAI chat messages]}, and writes one "
                    "line per input, in order: {\"id\", \"difficulty\" (0..1, P(the "
                    "weak reference model fails)), \"tier\", \"confidence\", "
                    "\"prompt_tokens\"}, or {\"id\", \"error\"} for a bad line.")
    classify.add_argument("--artifact", "--classifier", dest="artifact", type=Path, default=None,
                          help="an artifact file, or a directory `routegate learn` wrote")
    classify.set_defaults(func=run_classify)



def classify_line(model: ComplexityModel, line: bytes) -> dict:
    """One line of the scoring contract; errors become ``{"id", "error"}``."""
    ident = None
    try:
        obj = orjson.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("line is not a JSON object")
        ident = obj.get("id")
        counter = counter_for("o200k_base")
        if "messages" in obj:
            messages = obj["messages"]
            if not isinstance(messages, list):
                raise ValueError("messages must be a list")
            score = model.score_messages(messages)
            tokens = counter.count_messages(messages)
        else:
            prompt = obj.get("prompt")
            if not isinstance(prompt, str):
                raise ValueError("missing string field 'prompt' (or 'messages')")
            score = model.score(prompt)
            tokens = counter.count_text(prompt)
    except Exception as exc:  # a bad line must not stop the stream
        return {"id": ident, "error": f"{type(exc).__name__}: {exc}"}
    return {"id": ident, "difficulty": round(score.difficulty, 6), "tier": score.tier,
            "confidence": round(score.confidence, 6), "prompt_tokens": tokens}


def classify_stream(model: ComplexityModel, source: BinaryIO, sink: BinaryIO) -> int:
    """Score every non-blank line of ``source``, writing results in input order;
    a line over ``MAX_CLASSIFY_LINE`` bytes is an error line of its own."""
    count, batch = 0, []
    for line in bounded_lines(source, MAX_CLASSIFY_LINE):
        if line is not None and not line.strip():
            continue
        result = (classify_line(model, line) if line is not None else
                  {"id": None, "error": f"line over {MAX_CLASSIFY_LINE:,} bytes"})
        batch.append(orjson.dumps(result))
        count += 1
        if len(batch) >= CLASSIFY_BATCH:
            sink.write(b"\n".join(batch) + b"\n")
            batch.clear()
    if batch:
        sink.write(b"\n".join(batch) + b"\n")
    sink.flush()
    return count


def run_classify(args: argparse.Namespace) -> int:
    classify_stream(ComplexityModel.load(args.artifact), sys.stdin.buffer, sys.stdout.buffer)
    return 0
