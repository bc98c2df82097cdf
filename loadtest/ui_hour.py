"""An hour of varied load on a real gateway (simulated models), then a /ui screenshot.

    python -m loadtest.ui_hour --minutes 60 --out docs/ui.png

The load per minute: a steady base from two teams (auto with JSON output, which
escalates off the cheapest model; streams), a burst between minutes 20 and 30
that queues, a failing model between 35 and 40 (5xx, its breaker opens), a few
requests over a model's output cap (400) and a capped team (429). Needs
chromium and chromium-driver for the screenshot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

import httpx

from loadtest.browser import headless_chromium
from loadtest.servers import (
    OTHER_KEY,
    TEST_KEY,
    base_config,
    hashed,
    run_gateway,
    run_simulator,
    sim_model,
)

ADMIN_KEY = "sk-admin-ui-hour-0a1b2c3d4e5f"
CAPPED_KEY = "sk-capped-ui-hour-9z8y7x6w"
PROMPTS = ["hi", "Prove that there are infinitely many primes.",
           "Write a haiku about queues.", "Summarise the causes of the French revolution."]


def _sim(name: str, ability: float, price: float, **simulate: object) -> dict:
    return {**sim_model(name, ability, price, tpot_ms=15, prefill_tokens_per_s=20_000,
                        output_tokens_mean=40, **simulate), "scheduler": {"max_concurrency": 4}}


def config(sim: str) -> dict:
    c = base_config(sim, routing={"auto_policy": "cheapest"})
    c["models"] += [_sim("small", 0.5, 0.1, invalid_json_rate=0.3),
                    _sim("medium", 0.7, 1.0), _sim("large", 0.9, 5.0)]
    c["teams"][0]["allowed_models"] = ["small", "medium", "large", "fast", "local", "broken"]
    c["teams"][0]["budget"] = {"daily_hard_usd": 2.0}
    c["teams"].append({"name": "capped", "keys": [hashed(CAPPED_KEY)], "allowed_models": ["fast"],
                       "budget": {"daily_hard_usd": 0.0005}})
    c["breaker"] = {"consecutive_failures": 5, "cooldown_s": 30}
    return c


def _plan(minute: int, rng: random.Random) -> tuple[str, str, dict]:
    """One request: (key, model, extra body)."""
    roll = rng.random()
    if roll < 0.02:
        return TEST_KEY, "fast", {"max_tokens": 100_000}              # over the cap: 400
    if roll < 0.05:
        return CAPPED_KEY, "fast", {}                                  # past its budget: 429
    if 35 <= minute < 40 and roll < 0.2:
        return TEST_KEY, "broken", {}
    if roll < 0.3:
        return OTHER_KEY, "fast", {"stream": True}
    if roll < 0.55:
        return TEST_KEY, "auto", {"response_format": {"type": "json_object"}}
    return TEST_KEY, "auto", {"stream": True}


def _rate(minute: int) -> float:
    """Requests a second: a slow swell, and a burst in minutes 20-30."""
    return 8.0 if 20 <= minute < 30 else 2.0 + 1.5 * ((minute % 15) / 15)


async def _one(http: httpx.AsyncClient, url: str, key: str, model: str, extra: dict,
               rng: random.Random) -> None:
    body = {"model": model, "max_tokens": 48,
            "messages": [{"role": "user", "content": rng.choice(PROMPTS)}], **extra}
    try:
        async with http.stream("POST", url + "/v1/chat/completions", json=body,
                               headers={"authorization": f"Bearer {key}"}) as r:
            await r.aread()
    except httpx.HTTPError:
        pass


async def drive(url: str, minutes: float) -> int:
    rng, sent, start = random.Random(11), 0, time.monotonic()
    tasks: set[asyncio.Task[None]] = set()
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as http:
        while (elapsed := time.monotonic() - start) < minutes * 60:
            minute = int(elapsed // 60)
            await asyncio.sleep(rng.expovariate(_rate(minute)))
            key, model, extra = _plan(minute, rng)
            task = asyncio.create_task(_one(http, url, key, model, extra, rng))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
        await asyncio.gather(*tasks)
    return sent


def screenshot(url: str, out: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = headless_chromium()
    try:
        driver.get(url + "/ui")
        key = WebDriverWait(driver, 10).until(lambda d: d.find_element(By.NAME, "key"))
        key.send_keys(ADMIN_KEY)
        key.submit()
        WebDriverWait(driver, 20).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-requests path"))
        time.sleep(1)
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=62)
    parser.add_argument("--out", type=Path, default=Path("docs/ui.png"))
    args = parser.parse_args()
    with run_simulator() as sim, run_gateway(config(sim),
                                             env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as gw:
        sent = asyncio.run(drive(gw.url, args.minutes))
        time.sleep(12)          # the history's last write
        history = httpx.get(gw.url + "/admin/history",
                            headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
        counted = sum(sum(r["counts"]) for r in history["requests"])
        print(json.dumps({"sent": sent, "counted_in_history": counted,
                          "minutes_with_requests": sum(
                              1 for i in range(len(history["minutes"]))
                              if any(r["counts"][i] for r in history["requests"]))}))
        screenshot(gw.url, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
