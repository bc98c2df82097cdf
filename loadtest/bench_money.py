"""What routegate bills against what an honest upstream counted: tools, schemas, images.

    python -m loadtest.bench_money            # about 20 s

The simulator counts every prompt it receives from the raw request, with its
own tokenizer (``sim/count.py``): the messages, the tool
definitions as OpenAI renders them, the response schema and the images by
OpenAI's tile rule. A gateway in front of it, with one model at $1 per
million input tokens, is sent the requests of money round 3's table; for
each, the table prints the upstream's prompt tokens (its own record), what
routegate billed for the prompt, and the ratio. Then a team with a $0.10
daily hard limit sends the tools request 40 times: how many were refused,
and what the upstream consumed by its own count.
"""

from __future__ import annotations

import argparse
import base64
import io
import time
import uuid
from typing import Any

import httpx

from loadtest.report import print_rows
from loadtest.servers import OTHER_KEY, TEST_KEY, hashed, run_gateway, run_simulator

PRICE_IN = 1.0
LIMIT_USD = 0.10


def tools(n: int = 50) -> list[dict[str, Any]]:
    """Agent-sized tools: ten documented fields each."""
    fields = {f"field_{j}": {"type": "string", "description": f"What field {j} of the record "
                             "holds, in the caller's own words, as free text."} for j in range(10)}
    return [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool {i}: looks up, updates or lists records of "
        f"kind {i} in the back office, with paging and filters.",
        "parameters": {"type": "object", "properties": fields, "required": ["field_0"]}}}
        for i in range(n)]


def schema(n: int = 200) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "report", "schema": {
        "type": "object", "required": [f"f{i}" for i in range(n)],
        "properties": {f"f{i}": {"type": "string", "description": f"Part {i} of the report."}
                       for i in range(n)}}}}


def image(size: int = 2048) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), (30, 60, 90)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


HI = [{"role": "user", "content": "hi"}]
CASES: dict[str, dict[str, Any]] = {
    '"hi" with 50 tool definitions': {"messages": HI, "tools": tools()},
    '"hi" with a 200-field json_schema': {"messages": HI, "response_format": schema()},
    "a 2048x2048 image": {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": image()}}]}]},
    "the tools request, streamed": {"messages": HI, "tools": tools(), "stream": True},
}


def _ledger_prompt(gw_url: str, key: str) -> tuple[int, int]:
    r = httpx.get(gw_url + "/v1/usage", headers={"authorization": f"Bearer {key}"}).json()
    return (sum(int(x["input_tokens"]) for x in r["ledger"]),
            sum(int(x["cost_nanousd"]) for x in r["ledger"]))


def _settled(gw_url: str, key: str, before: tuple[int, int]) -> tuple[int, int]:
    deadline = time.monotonic() + 5
    while True:
        now = _ledger_prompt(gw_url, key)
        if now != before or time.monotonic() > deadline:
            return now[0] - before[0], now[1] - before[1]
        time.sleep(0.05)


def _post(gw_url: str, key: str, body: dict[str, Any]) -> int:
    if body.get("stream"):
        with httpx.stream("POST", gw_url + "/v1/chat/completions", timeout=60, json=body,
                          headers={"authorization": f"Bearer {key}"}) as r:
            for _ in r.iter_bytes():
                pass
            return r.status_code
    return httpx.post(gw_url + "/v1/chat/completions", json=body, timeout=60,
                      headers={"authorization": f"Bearer {key}"}).status_code


def run() -> None:
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "8") as sim:
        model = {"name": "m", "backend": "openai_compat", "base_url": sim,
                 "upstream_model": "default", "context_window": 128000,
                 "price": {"input_per_mtok": PRICE_IN, "output_per_mtok": 2 * PRICE_IN}}
        config = {"models": [model],
                  "teams": [{"name": "t", "keys": [hashed(TEST_KEY)]},
                            {"name": "capped", "keys": [hashed(OTHER_KEY)],
                             "budget": {"daily_hard_usd": LIMIT_USD}}],
                  "redis_url": "redis://127.0.0.1:6379/0",
                  "budget": {"key_prefix": f"rgbench-{uuid.uuid4().hex[:8]}"},
                  "batch": {"enabled": False}, "max_body_bytes": 8 * 1024 * 1024}
        sim_requests = sim.removesuffix("/v1") + "/sim/requests"
        with run_gateway(config) as gw:
            rows = []
            for name, body in CASES.items():
                seen, before = len(httpx.get(sim_requests).json()), _ledger_prompt(gw.url,
                                                                                    TEST_KEY)
                status = _post(gw.url, TEST_KEY, {"model": "m", "max_tokens": 8, **body})
                billed, _ = _settled(gw.url, TEST_KEY, before)
                honest = httpx.get(sim_requests).json()[seen]["prompt_tokens"]
                rows.append({"request": name, "status": status,
                             "upstream's prompt tokens": f"{honest:,}",
                             "routegate billed": f"{billed:,}",
                             "billed / upstream": f"{billed / honest:.2f}x"})
            print_rows(rows)
            seen = len(httpx.get(sim_requests).json())
            statuses = [_post(gw.url, OTHER_KEY, {"model": "m", "max_tokens": 8,
                                                  **CASES['"hi" with 50 tool definitions']})
                        for _ in range(40)]
            time.sleep(0.5)                   # the last settle is queued after its answer
            consumed = sum(r["prompt_tokens"] * PRICE_IN + r["completion_tokens"] * 2 * PRICE_IN
                           for r in httpx.get(sim_requests).json()[seen:]) / 1e6
            billed_usd = _ledger_prompt(gw.url, OTHER_KEY)[1] / 1e9
            print(f"\n$0.10 hard limit, the tools request 40 times: {statuses.count(200)} "
                  f"served, {statuses.count(429)} refused; the upstream consumed "
                  f"${consumed:.4f} by its own count, routegate billed ${billed_usd:.4f}")


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    run()


if __name__ == "__main__":
    main()
