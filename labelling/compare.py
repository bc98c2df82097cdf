"""Comparing two answers to one request: exactly where they have a checkable form, else a judge.

    scores = exact_scores(request_body, served_message, shadow_message)   # (1, 1), (0, 1)... or None
    messages = judge_messages(prompt_text, first, second)   # ask the judge: A, B or T
    judged = verdict(reply_text)                             # 1.0 A, 0.0 B, 0.5 T, None unreadable

Checkable forms, compared exactly (after parsing, so whitespace and key order
do not matter):

- a JSON answer (``response_format`` json_object or json_schema): the parsed values;
- tool calls: each call's name and parsed arguments, in order;
- a marked final number (``#### 42``, ``\\boxed{42}``, ``answer: 42``,
  ``answer is 42``): the numbers, to a relative 1e-9.

Equal answers are right for both; different ones, the shadow (the stronger
model) is the reference; an answer that does not parse (or calls no tool
where the other does) is wrong, whichever side it is on.

Anything else is for the judge. The judge sees the request and both answers,
each cut to ``MAX_JUDGED_CHARS``, and must reply with one letter.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

MAX_JUDGED_CHARS = 6000
JUDGE_MAX_TOKENS = 4
_FINAL = re.compile(r"(?:####|\\boxed\{|answer\s*(?:is|:)\s*)\s*\$?\s*(-?[\d,]*\.?\d+)",
                    re.IGNORECASE)
_LETTER = re.compile(r"([ABT])(?![A-Z])")     # "A", "B.", "T: a tie"; not "Both"
JUDGE_SYSTEM = ("You compare two answers to the same request. Reply with exactly one "
                "letter: A if answer A is better, B if answer B is better, T if they are "
                "equally good.")


def _json(text: Any) -> Any:
    try:
        return orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError:
        return None


def _calls(message: dict[str, Any]) -> list[tuple[Any, Any]] | None:
    """(name, parsed arguments) per tool call; [] if none; None if one does not parse."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return []
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        args = _json(fn.get("arguments")) if isinstance(fn, dict) else None
        if args is None:
            return None
        out.append((fn.get("name"), args))  # type: ignore[union-attr]
    return out


def final_number(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    found = _FINAL.findall(text[-2000:])
    if not found:
        return None
    try:
        value = float(found[-1].replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _scored(mine: Any, theirs: Any) -> tuple[float, float] | None:
    """Two checked answers (None: unusable): equal, both right; different, the
    shadow (the stronger model) is the reference; one unusable, it is wrong."""
    if mine is None and theirs is None:
        return None
    if mine is None or theirs is None:
        return (0.0, 1.0) if mine is None else (1.0, 0.0)
    return (1.0, 1.0) if mine == theirs else (0.0, 1.0)


def exact_scores(body: dict[str, Any], served: dict[str, Any],
                 shadow: dict[str, Any]) -> tuple[float, float] | None:
    """(served's score, shadow's) where the answers' form can be checked; None if not."""
    a_calls, b_calls = _calls(served), _calls(shadow)
    if a_calls != [] or b_calls != []:         # either called a tool: the calls are the answer
        return _scored(a_calls or None, b_calls or None)
    a, b = served.get("content"), shadow.get("content")
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        return _scored(_json(a), _json(b))
    x, y = final_number(a), final_number(b)
    if x is None or y is None:
        return None
    return (1.0, 1.0) if math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) else (0.0, 1.0)


def checkable(body: dict[str, Any], served: dict[str, Any]) -> bool:
    """Whether ``exact_scores`` can read the served answer's form (a tool call, JSON
    asked for, a final number), so that a shadow of it can be scored without a judge."""
    if _calls(served) != []:
        return True
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        return True
    return final_number(served.get("content")) is not None


def judge_messages(prompt: str, first: str, second: str) -> list[dict[str, str]]:
    cut = MAX_JUDGED_CHARS
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"Request:\n{prompt[:cut]}\n\nAnswer A:\n{first[:cut]}"
                                        f"\n\nAnswer B:\n{second[:cut]}\n\n"
                                        "Which answer is better? Reply A, B or T."}]


def verdict(reply: Any) -> float | None:
    """The score of answer A: 1 (A), 0 (B), 0.5 (T); None for anything else."""
    if not isinstance(reply, str):
        return None
    match = _LETTER.match(reply.strip().strip("*\"'()[]").upper())
    return {"A": 1.0, "B": 0.0, "T": 0.5}[match[1]] if match else None


def message_text(message: dict[str, Any]) -> str:
    """What the judge reads of an answer: its text, or its tool calls as JSON."""
    content = message.get("content")
    if isinstance(content, str) and content:
        return content
    calls = message.get("tool_calls")
    return orjson.dumps(calls).decode() if calls else ""
