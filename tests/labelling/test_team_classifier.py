"""Issue 22: ``teams[].classifier`` routes one team with a model ``routegate learn`` fitted
on its traffic, while the others keep ``routing.classifier``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import openai
from openai.types.chat import ChatCompletionMessageParam

from tests.gateway.test_escalation import cascade_config
from tests.support import OTHER_KEY, REPO, TEST_KEY, child_env, run_gateway

SUBJECTS = ["a sonnet about rain", "the rules of chess", "a haiku on tea", "how tides work",
            "a limerick about cats", "why the sky is blue", "a toast for a wedding",
            "how to boil an egg", "the plot of Hamlet", "a riddle about time"]


def learned_small_is_enough(tmp_path: Path) -> Path:
    """Labels where the config's cheapest model, ``small``, answers everything and
    ``large`` nothing: learned on them, small is the one to send a prompt to."""
    lines = []
    for i in range(60):
        prompt = f"Write {SUBJECTS[i % len(SUBJECTS)]}, take {i}."
        lines += [json.dumps({"prompt": prompt, "model": "small", "score": 1.0}),
                  json.dumps({"prompt": prompt, "model": "large", "score": 0.0})]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(lines) + "\n")
    out = tmp_path / "learned"
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "learn", "--labels", str(labels),
                          "--out", str(out), "--force"], cwd=REPO, env=child_env(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return out


def test_a_team_with_its_own_learned_classifier_routes_by_it(sim_url: str,
                                                             tmp_path: Path) -> None:
    config = cascade_config(sim_url)
    config["routing"] = {"auto_policy": "cost_quality"}  # the cheapest that meets the target
    config["escalation"] = {"min_confidence": 0.0}     # the first choice, not a start higher
    learned = learned_small_is_enough(tmp_path)
    config["teams"][0].update(quality=0.95, classifier=str(learned))
    config["teams"][1].update(quality=0.95, allowed_models=["small", "medium", "large"])
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write a short poem about the sea."}]
    with run_gateway(config) as gw:
        chosen = {}
        for team, key in (("own", TEST_KEY), ("shipped", OTHER_KEY)):
            client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=30)
            raw = client.chat.completions.with_raw_response.create(model="auto", messages=ask)
            chosen[team] = raw.headers["x-routegate-model"]
    assert chosen["own"] == "small"        # its learned ability: the labels say small suffices
    assert chosen["shipped"] != "small"    # configured ability 0.5 misses a 0.95 target
