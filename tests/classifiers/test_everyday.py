"""Everyday prompts on the demo fleet: trivial ones to ``small``, hard ones to ``large``.

The prompts (``everyday_prompts.jsonl``, labelled by hand, never used in
training) are routed by the real ``Router`` built from ``config/routegate.yaml``
with the demo team's quality target and its ``routing.classifier``, exactly as
``model: auto`` is served. Since issue 48 that classifier is ``demo_fleet.npz``:
``routegate learn`` on the selection half of ``lab/data/everyday_prompts.jsonl``
(written apart from this file; ``tests/lab/test_everyday_halves.py`` holds its
report half to the issue's bars). This file was not used to choose it.
"""

import asyncio
import json
from pathlib import Path

import pytest

from classifiers.complexity import ComplexityModel
from core.config import load_config
from gateway.auth import Caller
from gateway.pipeline.features import measure
from gateway.pipeline.routing import Router
from gateway.protocols.chat_body import parse_chat
from gateway.upstreams import build_backends

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [json.loads(line) for line in
           (Path(__file__).with_name("everyday_prompts.jsonl")).read_text().splitlines() if line]
ORDER = {"small": 0, "medium": 1, "large": 2}


@pytest.fixture(scope="module")
def route():
    config = load_config(ROOT / "config" / "routegate.yaml")
    classifier = ComplexityModel.load(config.routing.classifier)
    router = Router(config, build_backends(config), classifier)
    team = config.teams[0]
    caller = Caller(team=team, key=team.key_configs()[0])

    def choose(prompt: str) -> str:
        body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": prompt}]})
        chat = parse_chat(body.encode(), {})
        features = asyncio.run(measure(chat, router.encodings, router.scorer(chat, caller)))
        return router.choose(chat, caller, features).model

    return choose


# Issue 22's target was at least 4 of 5 trivial prompts to small and 3 of 5 hard ones
# to large. With the shipped model (learned_weight 0.5) all 10 trivial ones, 7 of 8
# medium ones and 5 of the 8 hard ones went where they are labelled (22 of 26). With
# the demo fleet's learned classifier (issue 48, demo_fleet.npz) all 10 trivial and
# all 8 hard ones do, and only 3 of the 8 medium ones (21 of 26): its pair heads tell
# medium prompts from the others poorly (docs/routing.md). Only the cases misrouted
# today are expected to fail, strictly: one that starts passing must leave this list,
# and one that passes today may not regress.
MISROUTED_TODAY: set[str] = set()
ISSUE_12 = pytest.mark.xfail(reason="misrouted today (see MISROUTED_TODAY)", strict=True)
TIERED = [pytest.param(c, id=c["prompt"][:40],
                       marks=[ISSUE_12] if c["prompt"][:40] in MISROUTED_TODAY else [])
          for c in PROMPTS if c["tier"] != "medium"]


def test_every_misrouted_case_exists() -> None:
    assert MISROUTED_TODAY <= {p.id for p in TIERED}


@pytest.mark.parametrize("case", TIERED)
def test_trivial_go_small_and_hard_go_large(route, case) -> None:
    assert route(case["prompt"]) == case["tier"]


def test_trivial_prompts_mostly_go_small(route) -> None:
    """Issue 48's bar: at least 9 in 10 trivial prompts go to the smallest model."""
    chosen = [route(c["prompt"]) for c in PROMPTS if c["tier"] == "small"]
    assert chosen.count("small") >= 0.9 * len(chosen) and "large" not in chosen, chosen


def test_hard_prompts_mostly_go_large(route) -> None:
    """Issue 48's bar: at least 3 in 4 hard prompts go to the largest model, none to
    the smallest."""
    chosen = [route(c["prompt"]) for c in PROMPTS if c["tier"] == "large"]
    assert chosen.count("large") >= 0.75 * len(chosen) and "small" not in chosen, chosen


def test_prompts_go_where_they_are_labelled(route) -> None:
    """A regression guard over all three tiers: 21 of the 26 prompts today (22 with
    the shipped model, which sent 3 hard ones to medium and 1 medium one to small)."""
    hits = [route(c["prompt"]) == c["tier"] for c in PROMPTS]
    assert sum(hits) >= 21, sum(hits)


def test_medium_prompts_sit_between(route) -> None:
    """No medium prompt goes to ``small``, and at least 3 of the 8 land on ``medium``
    (the shipped model: 7; the demo fleet's pair heads send 5 up to ``large``)."""
    chosen = [route(c["prompt"]) for c in PROMPTS if c["tier"] == "medium"]
    assert "small" not in chosen and chosen.count("medium") >= 3, chosen


def test_ordering_is_monotone_on_average(route) -> None:
    mean = {tier: sum(ORDER[route(c["prompt"])] for c in PROMPTS if c["tier"] == tier)
            / sum(c["tier"] == tier for c in PROMPTS) for tier in ORDER}
    assert mean["small"] < mean["medium"] < mean["large"], mean
