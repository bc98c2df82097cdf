"""Shadow answers: a share of a team's routed chat answered again by a stronger model, compared,
and kept as labels for ``routegate learn`` (``teams[].shadow``, core/learning_config.py).

    gw.shadows.offer(o, req, caller, answer)    # in serve's finally: the client has its answer

- **Which**: a routed (``model: auto``) chat request that was answered
  (200) by a model other than ``shadow.model``. A stream is sampled when
  its model is chosen (``sample_stream``), so that the relay keeps its
  events; its answer is assembled from them once the client has it all.
- **How many**: at most every 1/``rate``-th of those per replica (a credit
  grows by ``rate`` per eligible request and a shadow spends 1), and only
  while the team's *allowance* on this replica is not spent: every eligible
  answer adds ``rate`` × what it would have cost at the shadow model's
  prices, a shadow takes its worst case (the prompt, and its ``max_tokens``,
  at the batch price) and gives back what it did not spend. So a replica's
  shadow spend never passes ``rate`` × its traffic × (shadow price ÷ served
  price) plus one shadow's worst case, whatever the answers' lengths. At most
  ``MAX_IN_FLIGHT`` at once (``MAX_IN_FLIGHT_PER_TEAM`` of one team), none
  for a team past its soft limit, and
  without a ``judge`` none of an answer whose form cannot be checked; the
  others skipped and counted. The shadow may write twice what the served
  model wrote (at least ``MIN_OUTPUT_CAP``), and no more than the client
  allowed (``max_tokens``); an answer it had to cut short is no label. Each
  judge call writes ``JUDGE_MAX_TOKENS`` on a prompt of both answers, each
  cut to ``MAX_JUDGED_CHARS``; the judge's cost is on top.
- **How**: through ``run_line``, the whole pipeline, in the batch pool:
  the team's budget is reserved and settled for the shadow and the judge
  calls at the batch price, as for a batch line; they leave no labels of
  their own, and the team's rpm and tpm limits, which are its clients', do
  not count them (``own=True``). Nothing waits on it: it starts after the
  answer was sent.
- **Compared**: exactly where the answer's form can be checked
  (``labelling/compare.py``): agreeing answers are a 1 for both models, else
  a 0 for the served one and a 1 for the shadow; otherwise by ``judge``,
  twice with the answers' positions swapped, the served model's score the
  mean of the two votes and the shadow's its complement. Without a judge a
  free-form answer is not compared.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from backends.sse import SSEEvent
from classifiers.complexity import conversation_text
from core.learning_config import ShadowConfig
from gateway.auth import Caller
from gateway.money.pricing import cost_usd, pool_rate
from gateway.pipeline.answers import completion_message
from gateway.pipeline.outcome import Outcome
from gateway.pipeline.request import CHAT, ModelRequest
from gateway.pipeline.serve import run_line
from gateway.protocols.openai_chat import CHAT_DOOR
from labelling.compare import (
    JUDGE_MAX_TOKENS,
    checkable,
    exact_scores,
    judge_messages,
    message_text,
    verdict,
)

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.shadow")

MAX_IN_FLIGHT = 16
MAX_IN_FLIGHT_PER_TEAM = 8   # no team takes more than half the slots
MIN_OUTPUT_CAP = 32      # the least the shadow may write, whatever was served
SHADOW = "shadow"


@dataclass
class Shadows:
    gw: AppState
    compared: int = 0          # shadows that became labels
    skipped: int = 0           # sampled, but too many in flight, labels off, or not affordable
    failed: int = 0            # the shadow or judge call failed, or nothing to compare
    cut: int = 0               # the shadow reached its output cap: not judged, no label
    _credit: dict[str, float] = field(default_factory=dict)
    _allowance: dict[str, float] = field(default_factory=dict)   # team -> USD it may spend
    _running: dict[str, int] = field(default_factory=dict)       # team -> shadows in flight
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _closed: bool = False

    def sample_stream(self, req: ModelRequest, caller: Caller, model: str
                      ) -> list[SSEEvent] | None:
        """For a stream about to be relayed from ``model``: a list for the relay
        to keep its events in, when it is the one to shadow; else None."""
        shadow = caller.shadow
        if (shadow is None or not req.stream or not _eligible(req, shadow, model)
                or not self._take(caller.team_name, shadow.rate)):
            return None
        return []

    def _take(self, team: str, rate: float) -> bool:
        """One more eligible request: is it the one in every 1/rate to shadow?"""
        credit = self._credit.get(team, 0.0) + rate
        self._credit[team] = credit - 1.0 if credit >= 1.0 else credit
        return credit >= 1.0

    def offer(self, o: Outcome, req: ModelRequest | None, caller: Caller,
              answer: Any) -> None:
        """After the answer: a stream comes with an ``answer`` only when it was
        sampled (``sample_stream``); a JSON answer is sampled here."""
        shadow = caller.shadow
        if (shadow is None or req is None or o.status != 200
                or not _eligible(req, shadow, o.model)):
            return
        team, model = caller.team_name, self.gw.models.get(shadow.model)
        if model is None:        # checked at start-up; a reload cannot add models
            return
        self._allowance[team] = self._allowance.get(team, 0.0) + shadow.rate * cost_usd(
            model, o.prompt_tokens, o.completion_tokens)
        if answer is None or (not req.stream and not self._take(team, shadow.rate)):
            return
        cap = max(MIN_OUTPUT_CAP, 2 * o.completion_tokens)   # twice what was served
        cap = min(cap, req.max_tokens) if req.max_tokens else cap
        worst = cost_usd(model, o.prompt_tokens, cap, pool_rate(self.gw.config, "batch"))
        if (len(self._tasks) >= MAX_IN_FLIGHT or self.gw.labels is None or self._closed
                or self._running.get(team, 0) >= MAX_IN_FLIGHT_PER_TEAM
                or self.gw.soft_limited(caller) or self._allowance[team] < 0
                or (shadow.judge is None
                    and not checkable(req.body, completion_message(answer)[0]))):
            self.skipped += 1
            return
        assert o.model is not None
        self._allowance[team] -= worst
        body = {**req.body, "model": shadow.model, "n": 1, "max_tokens": cap}
        body.pop("max_completion_tokens", None)
        task = asyncio.create_task(self._run(caller, shadow, req, body, o.model, o.request_id,
                                             answer, worst))
        self._tasks.add(task)
        self._running[team] = self._running.get(team, 0) + 1
        task.add_done_callback(lambda done: self._finished(team, done))

    def _finished(self, team: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._running[team] -= 1

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, caller: Caller, shadow: ShadowConfig, req: ModelRequest,
                   body: dict[str, Any], served: str, request_id: str, answer: Any,
                   held: float) -> None:
        try:
            theirs = await self._shadow_answer(caller, body, held)
            scores = None
            if theirs is not None:
                scores = await self._compare(caller, shadow, req, completion_message(answer)[0],
                                             theirs)
        except _Cut:
            return
        except Exception:
            logger.exception("shadow of request %s failed", request_id)
            scores = None
        if scores is None or self.gw.labels is None:
            self.failed += 1
            return
        self.compared += 1
        self.gw.labels.observe(caller.team.name, request_id, req.messages,
                               labels=[(served, scores[0], SHADOW),
                                       (shadow.model, scores[1], SHADOW)],
                               has_tools=req.has_tools,
                               has_response_format=req.has_response_format,
                               keep_text=self.gw.config.logging.prompts)

    async def _shadow_answer(self, caller: Caller, body: dict[str, Any],
                             held: float) -> dict[str, Any] | None:
        """The shadow model's message, None if it failed (``_Cut`` if it was cut
        short); what it did not spend of ``held`` goes back to the team's allowance."""
        data = await self._ask(caller, body)
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict):
            spent = cost_usd(self.gw.models[str(body["model"])],
                             _count(usage.get("prompt_tokens")),
                             _count(usage.get("completion_tokens")),
                             pool_rate(self.gw.config, "batch"))
            team = caller.team.name
            self._allowance[team] = self._allowance.get(team, 0.0) + held - spent
        message, finish, _ = completion_message(data)
        if data is not None and finish == "length":
            self.cut += 1
            raise _Cut
        return None if data is None else message

    async def _ask(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any] | None:
        status, raw, _ = await run_line(self.gw, caller, CHAT_DOOR, body, pool="batch",
                                        own=True)
        if status != 200:
            logger.info("shadow call to %s answered %d", body.get("model"), status)
            return None
        data = orjson.loads(raw)
        return data if isinstance(data, dict) else None

    async def _compare(self, caller: Caller, shadow: ShadowConfig, req: ModelRequest,
                       mine: dict[str, Any], theirs: dict[str, Any]
                       ) -> tuple[float, float] | None:
        """(the served model's score, the shadow model's), or None."""
        scores = exact_scores(req.body, mine, theirs)
        if scores is not None:
            return scores
        if shadow.judge is None:
            return None
        prompt, a, b = conversation_text(req.messages), message_text(mine), message_text(theirs)
        first, second = await asyncio.gather(self._judge(caller, shadow.judge, prompt, a, b),
                                             self._judge(caller, shadow.judge, prompt, b, a))
        votes = [v for v in (first, None if second is None else 1.0 - second) if v is not None]
        if not votes:
            return None
        score = sum(votes) / len(votes)
        return score, 1.0 - score

    async def _judge(self, caller: Caller, judge: str, prompt: str, first: str,
                     second: str) -> float | None:
        reply = await self._ask(caller, {"model": judge, "max_tokens": JUDGE_MAX_TOKENS,
                                         "temperature": 0,
                                         "messages": judge_messages(prompt, first, second)})
        return None if reply is None else verdict(completion_message(reply)[0].get("content"))


class _Cut(Exception):
    """The shadow reached its output cap: an answer cut short is not compared."""


def _eligible(req: ModelRequest, shadow: ShadowConfig, model: str | None) -> bool:
    """A routed chat request answered by a model other than the shadow's."""
    return req.routed and req.operation == CHAT and model not in (None, shadow.model)


def _count(value: Any) -> int:
    """A token count from the answer's usage (the gateway's own figures, bounded)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
