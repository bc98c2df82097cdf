"""/metrics per model against the team's ledger: escalations and response-cache hits.

A request escalated from a model that answered invalid JSON to one that answered is
billed on both: each model's spend, prompt tokens and cached tokens in /metrics equal
its ledger row, whose figures the budget's settle wrote. A response-cache hit billed
at half the original's price is in the spend too.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import httpx
import openai

from tests.support import TEST_KEY, base_config, run_gateway, run_simulator


def sim(url: str, name: str, upstream: str, price: float) -> dict:
    return {"name": name, "backend": "openai_compat", "base_url": url,
            "upstream_model": upstream, "ability": 0.7, "context_window": 32_000,
            "price": {"input_per_mtok": price, "output_per_mtok": 2 * price,
                      "cached_input_per_mtok": price / 10}}


def per_model(text: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, labels, value in re.findall(r'^(routegate_\w+)\{([^}]*)\} (\S+)$', text, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if got.get("team") != "test" or "model" not in got:
            continue
        if name == "routegate_cost_usd_total":
            out[got["model"]]["cost_usd"] += float(value)
        elif name == "routegate_tokens_total" and got.get("kind") in ("prompt", "cached"):
            out[got["model"]][got["kind"]] += float(value)
    return out


def test_each_models_metrics_are_its_ledger_row() -> None:
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "12") as url:
        config = base_config(url)
        config["models"] = [sim(url, "ij", "invalid-json", 1.0), sim(url, "m", "default", 3.0)]
        config["teams"] = [{**config["teams"][0],
                            "response_cache": {"ttl_s": 600, "hit_price_fraction": 0.5}}]
        config["routing"] = {"auto_policy": "cheapest"}
        config["escalation"] = {"ladder": ["ij", "m"], "max_steps": 1}
        with run_gateway(config) as gw:
            client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0,
                                   timeout=60)
            rules = "You keep the house rules. " + "Answer briefly, cite. " * 300
            for _ in range(3):
                answer = client.chat.completions.with_raw_response.create(
                    model="auto", max_tokens=32, temperature=0.7,
                    response_format={"type": "json_object"}, messages=[
                        {"role": "system", "content": rules},
                        {"role": "user", "content": "Which rule applies? Reply in JSON."}])
                assert answer.headers["x-routegate-model"] == "m"
            seen = []
            for _ in range(2):
                answer = client.chat.completions.with_raw_response.create(
                    model="m", max_tokens=16, temperature=0,
                    messages=[{"role": "user", "content": "Name the capital of Peru."}])
                seen.append(answer.headers["x-routegate-cache"])
                time.sleep(1.0)           # the miss is stored after its answer
            assert seen == ["miss", "hit"]
            deadline = time.monotonic() + 10
            while True:
                usage = httpx.get(gw.base_url + "/usage",
                                  headers={"authorization": f"Bearer {TEST_KEY}"}).json()
                metrics = per_model(httpx.get(gw.url + "/metrics").text)
                ledger = {r["model"]: r for r in usage["ledger"]}
                if (abs(sum(m["cost_usd"] for m in metrics.values())
                        - usage["spent_today_nanousd"] / 1e9) < 1e-9
                        or time.monotonic() > deadline):
                    break
                time.sleep(0.2)
    assert set(ledger) == set(metrics) == {"ij", "m"}
    assert ledger["ij"]["input_tokens"] > 0 and ledger["m"]["cached_tokens"] > 0
    for model, row in ledger.items():
        assert metrics[model]["prompt"] == row["input_tokens"], model
        assert metrics[model]["cached"] == row["cached_tokens"], model
        assert abs(metrics[model]["cost_usd"] - row["cost_nanousd"] / 1e9) < 1e-9, model
