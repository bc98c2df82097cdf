"""What a request teaches the router: labels from its escalation, its record for feedback.

    learn_from(gw, o, req, attempts, caller, bill)   # labels, and a shadow answer maybe

Called once per request from ``serve``'s ``finally``. An escalation is a
verdict on each rung: an answer refused for its form or its confidence
(``policies.validators.FAILED_ANSWER``) is a 0 for that model on this prompt,
and the rung whose answer passed a 1. Upstream failures (fallbacks) and a
start higher on the ladder for low confidence say nothing of the models'
quality, so they label nothing. A team with ``feedback: true`` also leaves
the served record ``POST /v1/feedback`` attaches a score to. The rest is the
recorder's (``labelling/recorder.py``): for every other request this costs
two attribute reads.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.auth import Caller
from gateway.money.settle import Bill
from gateway.pipeline.attempts import Attempts
from gateway.pipeline.outcome import Outcome
from gateway.pipeline.request import EMBEDDING, ModelRequest
from labelling.recorder import Recorder
from policies.validators import FAILED_ANSWER

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.labels")
ESCALATION = "escalation"


def escalation_labels(attempts: Attempts) -> list[tuple[str, float, str]]:
    """(model, score, source) per rung that was judged; [] if none was refused."""
    if not attempts.escalations:
        return []
    labels = [(a.model.name, 0.0, ESCALATION) for a in attempts.tried
              if a.outcome in FAILED_ANSWER]
    if labels and attempts.tried[-1].outcome == "ok":
        labels.append((attempts.tried[-1].model.name, 1.0, ESCALATION))
    return labels


def learn_from(gw: AppState, o: Outcome, req: ModelRequest | None, attempts: Attempts,
               caller: Caller, bill: Bill) -> None:
    """Everything a finished request leaves for learning. Never raises: the
    request is answered and settled already."""
    try:
        answered = bill.served and o.status == 200
        hand_over(gw.labels, o, req, attempts, feedback=caller.feedback and answered,
                  keep_text=gw.switches.log_prompts)
        answer = bill.answer if bill.answer is not None else (
            bill.streamed if bill.shadowed else None)
        gw.shadows.offer(o, req, caller, answer if answered else None)
    except Exception:
        logger.exception("request %s: its labels were not recorded", o.request_id)


def hand_over(recorder: Recorder | None, o: Outcome, req: ModelRequest | None,
              attempts: Attempts, *, feedback: bool, keep_text: bool) -> None:
    """``feedback``: remember this answer for POST /v1/feedback (the team has it
    on, and the client got the answer)."""
    if recorder is None or req is None or req.operation == EMBEDDING or o.team is None:
        return
    labels = escalation_labels(attempts)
    served = o.model if feedback and o.model else None
    if not labels and served is None:
        return
    recorder.observe(o.team, o.request_id, req.messages, labels=labels, served_model=served,
                     has_tools=req.has_tools, has_response_format=req.has_response_format,
                     keep_text=keep_text)
