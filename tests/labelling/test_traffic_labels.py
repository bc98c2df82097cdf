"""Issue 22: labels from the traffic a real gateway serves (escalations, POST /v1/feedback),
kept per team in the real Redis, and ``routegate learn --from-traffic`` on them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
import redis.asyncio as aioredis
import yaml
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONObject

from classifiers.sketch import PromptSketch
from core.learning_config import LearningSettings
from labelling.store import Label, LabelStore
from tests.gateway.test_escalation import cascade_config
from tests.support import OTHER_KEY, REPO, TEST_KEY, Gateway, child_env, hashed, run_gateway

QUIET_KEY = "sk-quiet-team"
JSON_FORMAT: ResponseFormatJSONObject = {"type": "json_object"}


def labels_of(config: dict, team: str) -> list[Label]:
    async def read() -> list[Label]:
        client = aioredis.Redis.from_url(config["redis_url"])
        try:
            store = LabelStore(client, config["budget"]["key_prefix"], LearningSettings())
            return [label async for label in store.read(team)]
        finally:
            await client.aclose()
    return asyncio.run(read())


@pytest.fixture(scope="module")
def learning(sim_url: str):
    config = cascade_config(sim_url, invalid_json_rate=1.0)
    config["teams"][0]["feedback"] = True
    config["teams"][1]["allowed_models"] = ["small", "medium", "large"]
    config["teams"].append({"name": "quiet", "keys": [hashed(QUIET_KEY)],
                            "allowed_models": ["small", "medium", "large"]})
    with run_gateway(config) as gw:
        yield gw, config


def sdk(gw: Gateway, key: str = TEST_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, timeout=30)


def give(client: openai.OpenAI, request_id: str, score: object) -> dict:
    reply = client.post("/feedback", body={"request_id": request_id, "score": score},
                        cast_to=object)
    assert isinstance(reply, dict), reply
    return reply


def test_an_escalation_labels_the_refused_rung_0_and_the_one_that_passed_1(learning) -> None:
    gw, config = learning
    prompt: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "List three Norwegian cities as a JSON object."}]
    raw = sdk(gw).chat.completions.with_raw_response.create(
        model="auto", messages=prompt, response_format=JSON_FORMAT)
    assert raw.headers["x-routegate-attempts"] == "small:truncated,medium:ok"
    rid = raw.headers["x-routegate-request-id"]
    mine = []
    for _ in range(40):                       # written off the request path, within 0.25 s
        mine = [label for label in labels_of(config, "test") if label.request_id == rid]
        if mine:
            break
        asyncio.run(asyncio.sleep(0.1))
    assert sorted((label.model, label.score, label.source) for label in mine) == [
        ("medium", 1.0, "escalation"), ("small", 0.0, "escalation")]
    sketch = PromptSketch.from_bytes(mine[0].sketch)
    assert sketch.digest == PromptSketch.from_bytes(mine[1].sketch).digest
    assert all(label.text is None for label in mine)      # logging.prompts is off
    metrics = httpx.get(gw.url + "/metrics").text
    written = [line for line in metrics.splitlines()
               if line.startswith('routegate_labels_total{result="written"}')]
    assert written and float(written[0].split()[-1]) >= 1


def test_feedback_scores_the_model_that_answered_once(learning) -> None:
    gw, config = learning
    client = sdk(gw)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Say hi."}])
    rid, model = raw.headers["x-routegate-request-id"], raw.headers["x-routegate-model"]
    answer = give(client, rid, 0.25)        # at once: the record may still be on its way
    assert answer == {"object": "feedback", "request_id": rid, "model": model, "score": 0.25}
    with pytest.raises(openai.ConflictError) as again:
        give(client, rid, 1.0)
    assert again.value.body["code"] == "feedback_exists"   # type: ignore[index]
    ours = [label for label in labels_of(config, "test") if label.request_id == rid]
    assert [(label.model, label.score, label.source) for label in ours] == [
        (model, 0.25, "feedback")]


def test_feedback_is_for_the_teams_own_recent_answers_only(learning) -> None:
    gw, _ = learning
    client = sdk(gw)
    rid = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Say hello."}]
    ).headers["x-routegate-request-id"]
    with pytest.raises(openai.PermissionDeniedError) as off:      # team "other": not on
        give(sdk(gw, OTHER_KEY), rid, 1.0)
    assert off.value.body["code"] == "feedback_disabled"   # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as unknown:
        give(client, "req_000000000000000000000000", 1.0)
    assert unknown.value.body["param"] == "request_id"   # type: ignore[index]
    for bad in (1.5, -0.1, "good", None, True, "0.5", [0.5]):
        with pytest.raises(openai.BadRequestError):
            give(client, rid, bad)
    r = httpx.post(gw.base_url + "/feedback", json={"request_id": rid, "score": 1})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    # The key is checked before the body is read, and the body is small.
    big = b'{"request_id": "' + b"x" * 8000 + b'", "score": 1}'
    r = httpx.post(gw.base_url + "/feedback", content=big,
                   headers={"content-type": "application/json"})
    assert r.status_code == 401
    r = httpx.post(gw.base_url + "/feedback", content=big,
                   headers={"content-type": "application/json", "authorization": f"Bearer {TEST_KEY}"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"


def test_a_team_with_feedback_elsewhere_cannot_score_this_teams_answer(sim_url: str) -> None:
    config = cascade_config(sim_url)
    config["teams"][0]["feedback"] = True
    config["teams"][1].update(feedback=True, allowed_models=["small", "medium", "large"])
    with run_gateway(config) as gw:
        rid = sdk(gw).chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "Hi"}]
        ).headers["x-routegate-request-id"]
        with pytest.raises(openai.NotFoundError):
            give(sdk(gw, OTHER_KEY), rid, 1.0)
        assert give(sdk(gw), rid, 1.0)["request_id"] == rid


def test_learn_from_traffic_reads_the_teams_labels_and_writes_an_artifact(
        learning, tmp_path: Path) -> None:
    gw, config = learning
    client = sdk(gw, QUIET_KEY)
    topics = ["Oslo", "Bergen", "Tromsø", "Lisbon", "Kyoto", "Lagos", "Quito", "Perth",
              "Hanoi", "Tunis", "Riga", "Cusco"]
    for topic in topics:       # every one escalates: small refused, medium passed
        client.chat.completions.create(model="auto", response_format=JSON_FORMAT,
                                       messages=[{"role": "user",
                                                  "content": f"The weather in {topic} as JSON"}])
    path = tmp_path / "routegate.yaml"
    path.write_text(yaml.safe_dump(config))
    for _ in range(40):
        if len(labels_of(config, "quiet")) >= 2 * len(topics):
            break
        asyncio.run(asyncio.sleep(0.1))
    out = tmp_path / "learned"
    run = subprocess.run([sys.executable, "-m", "routegate", "learn", "--from-traffic",
                          "--team", "quiet", "--since", "1h", "--config", str(path),
                          "--out", str(out), "--force"],
                         cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "traffic labels of quiet: {'escalation': 24}" in run.stdout
    provenance = json.loads((out / "LEARNED.json").read_text())
    assert provenance["n_labels"] == 24 and provenance["n_prompts"] == 12
    assert provenance["by_source"] == {"escalation": 24}
    assert sorted(provenance["models"]) == ["medium", "small"]
    assert provenance["weak"] == "small"
    # the ladder is the team's models by price; 12 prompts are too few for pair heads
    assert provenance["ladder"] == ["small", "medium"]
    assert "needs more labels: 12 labelled prompts, about 100 wanted (88 more)" in run.stderr
    nobody = subprocess.run([sys.executable, "-m", "routegate", "learn", "--from-traffic",
                             "--team", "nobody", "--config", str(path), "--out", str(out)],
                            cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120)
    assert nobody.returncode == 2 and "no team 'nobody'" in nobody.stderr
