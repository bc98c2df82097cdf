"""Issue 22: ``teams[].classifier`` routes one team with a model ``routegate learn`` fitted
on its traffic, while the others keep ``routing.classifier``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam

from classifiers.complexity import DEFAULT_ARTIFACT
from tests.gateway.test_escalation import cascade_config
from tests.support import OTHER_KEY, REPO, TEST_KEY, Gateway, child_env, run_gateway

SUBJECTS = ["a sonnet about rain", "the rules of chess", "a haiku on tea", "how tides work",
            "a limerick about cats", "why the sky is blue", "a toast for a wedding",
            "how to boil an egg", "the plot of Hamlet", "a riddle about time"]


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learned_small_is_enough(tmp_path_factory.mktemp("learned"))


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
    run = subprocess.run([sys.executable, "-m", "routegate", "learn", "--labels", str(labels),
                          "--out", str(out), "--force"], cwd=REPO, env=child_env(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return out


ASK: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Write a short poem about the sea."}]


def two_teams(sim_url: str) -> dict:
    config = cascade_config(sim_url)
    config["routing"] = {"auto_policy": "cost_quality"}  # the cheapest that meets the target
    config["escalation"] = {"min_confidence": 0.0}     # the first choice, not a start higher
    config["teams"][0].update(quality=0.95)
    config["teams"][1].update(quality=0.95, allowed_models=["small", "medium", "large"])
    return config


def chosen_for(gw: Gateway, key: str) -> str:
    client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=ASK)
    return raw.headers["x-routegate-model"]


def test_a_team_with_its_own_learned_classifier_routes_by_it(sim_url: str,
                                                             learned: Path) -> None:
    config = two_teams(sim_url)
    config["teams"][0].update(classifier=str(learned))
    with run_gateway(config) as gw:
        chosen = {team: chosen_for(gw, key) for team, key in (("own", TEST_KEY),
                                                               ("shipped", OTHER_KEY))}
    assert chosen["own"] == "small"        # its learned ability: the labels say small suffices
    assert chosen["shipped"] != "small"    # configured ability 0.5 misses a 0.95 target


def test_a_classifier_named_or_rewritten_while_running_is_loaded_without_a_restart(
        sim_url: str, learned: Path, tmp_path: Path) -> None:
    admin = {"authorization": "Bearer sk-admin-classifier"}
    own, missing = tmp_path / "own", str(tmp_path / "missing")
    shutil.copytree(learned, own)
    artifact = own / DEFAULT_ARTIFACT.name
    good = artifact.read_bytes()
    with run_gateway(two_teams(sim_url), env={"ROUTEGATE_ADMIN_KEY": admin["authorization"][7:]}
                     ) as gw:
        assert chosen_for(gw, TEST_KEY) != "small"          # the shipped classifier
        # A path that holds no artifact: reported, and the team stays as it was.
        config = yaml.safe_load(gw.config_path.read_text())
        config["teams"][0]["classifier"] = missing
        gw.config_path.write_text(yaml.safe_dump(config))
        body = httpx.post(gw.url + "/admin/reload", headers=admin).json()
        assert body["reloaded"] is True and body["needs_restart"] == []
        assert body["classifiers_unavailable"] == [missing]
        assert chosen_for(gw, TEST_KEY) != "small"
        # Named in the file: the watcher loads it, and the team routes by it.
        config["teams"][0]["classifier"] = str(own)
        gw.config_path.write_text(yaml.safe_dump(config))
        assert wait_until(lambda: chosen_for(gw, TEST_KEY) == "small")
        assert chosen_for(gw, OTHER_KEY) != "small"         # the other team: unchanged
        # Half-copied in place (as a cp in progress leaves it): the watcher tries it,
        # keeps the last good copy routing, and lives on.
        artifact.write_bytes(good[: len(good) // 2])
        assert wait_until(lambda: "its last good copy" in gw.log())
        assert chosen_for(gw, TEST_KEY) == "small"
        # Replaced by another artifact (the shipped one): the watcher loads that.
        staged = own / "staged.npz"
        shutil.copyfile(DEFAULT_ARTIFACT, staged)
        os.replace(staged, artifact)
        assert wait_until(lambda: chosen_for(gw, TEST_KEY) != "small")
        # SIGHUP re-reads the file too (nothing changed since: the watcher is quiet).
        reloads = gw.log().count("reloaded 2 teams")
        os.kill(gw.proc.pid, signal.SIGHUP)
        assert wait_until(lambda: gw.log().count("reloaded 2 teams") == reloads + 1)
        assert "Traceback" not in gw.log()


def wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False
