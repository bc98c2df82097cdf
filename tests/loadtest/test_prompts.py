"""Synthetic prompts have the token count the trace asks for, as the gateway counts it."""

from __future__ import annotations

import pytest

from classifiers.length import counter_for
from loadtest.prompts import PromptBuilder


@pytest.mark.parametrize(("tokens", "passages"), [(50, 0), (1020, 0), (4083, 0), (3000, 12)])
def test_prompt_has_the_trace_length(tokens: int, passages: int) -> None:
    messages = PromptBuilder().messages(tokens, request_no=123, passages=passages)
    assert counter_for("o200k_base").count_messages(messages) == pytest.approx(tokens, abs=3)


def test_prompts_differ_but_bodies_are_cached() -> None:
    builder = PromptBuilder()
    a, b = builder.text(500, request_no=1), builder.text(500, request_no=2)
    assert a != b and a.split("\n", 1)[1] == b.split("\n", 1)[1]
    assert builder.body(500) is builder.body(500)
