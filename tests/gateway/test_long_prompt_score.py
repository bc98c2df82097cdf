"""A prompt past ``LONG_PROMPT_BYTES`` is counted off the event loop and scored on it.

In the worker thread the score held the GIL as long as on the loop, and its time
(``routegate_classifier_seconds``) was mostly the thread's wait for it."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from classifiers.complexity import ComplexityModel
from core.config import load_config
from gateway.auth import Caller
from gateway.pipeline.features import LONG_PROMPT_BYTES, _measure_sync, measure
from gateway.pipeline.routing import Router
from gateway.protocols.chat_body import parse_chat
from gateway.upstreams import build_backends

ROOT = Path(__file__).resolve().parents[2]


def test_a_long_prompt_is_scored_on_the_loop_and_as_a_short_one_would_be() -> None:
    config = load_config(ROOT / "config" / "routegate.yaml")
    classifier = ComplexityModel.load(config.routing.classifier)
    router = Router(config, build_backends(config), classifier)
    team = config.teams[0]
    caller = Caller(team=team, key=team.key_configs()[0])
    text = "Prove that the sum of two even numbers is even. " * 600
    body = json.dumps({"model": "auto", "messages": [
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]})
    chat = parse_chat(body.encode(), {})
    chat.size = len(body)                            # as serve() sets it
    assert chat.size > LONG_PROMPT_BYTES
    scorer = router.scorer(chat, caller)
    assert scorer is not None
    threads: list[int] = []
    score_messages = scorer.model.score_messages

    def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
        threads.append(threading.get_ident())
        return score_messages(*args, **kwargs)

    async def main() -> tuple[int, object]:
        scorer.model.score_messages = recorded  # type: ignore[method-assign]
        try:
            return threading.get_ident(), await measure(chat, router.encodings, scorer, True)
        finally:
            del scorer.model.score_messages

    loop_thread, features = asyncio.run(main())
    assert threads == [loop_thread]                  # scored once, on the loop
    inline = _measure_sync(chat, router.encodings, scorer, True)
    assert features.score == inline.score            # type: ignore[attr-defined]
    assert features.token_counts == inline.token_counts  # type: ignore[attr-defined]
    assert features.chain == inline.chain            # type: ignore[attr-defined]
    assert features.scorer is scorer and features.classify_s > 0  # type: ignore[attr-defined]
