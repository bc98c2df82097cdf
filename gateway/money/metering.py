"""The usage a request is billed for, checked before it reaches the money.

    usage = billed_usage(reported, prompt_tokens=120, max_output=50)

An upstream's usage is trusted only within what the request could cost:
negative counts are refused (the request is billed from our own count
instead), and completion tokens are clamped to the output that was reserved,
so a faulty or hostile upstream can never bill past the hard limit. Either
correction is marked on the usage and counted in telemetry.
"""

from __future__ import annotations

import logging
from typing import Any

from classifiers.length import counter_for, message_text
from core.types import Usage

logger = logging.getLogger("routegate.metering")


def billed_usage(reported: Usage | None, *, prompt_tokens: int, max_output: int,
                 estimate_output: int) -> tuple[Usage, str | None]:
    """(usage to bill, anomaly or None). ``estimate_output`` is our own count of
    the answer, used when the upstream reported nothing usable."""
    anomaly = None
    if reported is not None and (reported.prompt_tokens < 0 or reported.completion_tokens < 0):
        logger.warning("upstream reported negative usage %s; billing our own count", reported)
        reported, anomaly = None, "negative"
    if reported is None:
        return Usage(prompt_tokens, min(estimate_output, max_output), estimated=True), anomaly
    if reported.completion_tokens > max_output:
        logger.warning("upstream reported %d completion tokens for a request reserved at %d; "
                       "billing %d", reported.completion_tokens, max_output, max_output)
        return Usage(reported.prompt_tokens, max_output, reported.estimated), "over_reserved"
    return reported, anomaly


def count_answer_tokens(data: Any, encoding: str) -> int:
    """Tokens in a non-streamed answer's choices (content, tool calls, refusal)."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return 0
    texts = []
    for choice in data["choices"]:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        texts.append(message_text(message.get("content")))
        texts.append(message_text(message.get("refusal")))
        for call in message.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                texts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    text = "".join(t for t in texts if t)
    return counter_for(encoding).count_text(text) if text else 0
