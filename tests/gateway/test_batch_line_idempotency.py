"""Issue 20, item 12: a batch line that runs again under its line id is billed once.

The gateway's own state, started in this process on the shared Redis, and
``run_line`` (what the batch worker calls) run several times with one line id,
as after worker crashes: every run is answered, the line is billed once, and
the bill that stands is the last run's (the answer that gets recorded: the
highest generation, ``batch/scripts.py``).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson

from batch.records import LineRun, Owner
from budget.nanousd import cost_nanousd
from core.config import parse_config
from gateway.batch_runner import line_runner
from gateway.pipeline.serve import run_line
from gateway.protocols.openai_chat import CHAT_DOOR
from gateway.state import AppState
from tests.support import TEST_KEY, hashed, in_process


def config(tmp_path: Path) -> dict:
    return {
        "models": [{"name": "small", "backend": "simulated",
                    "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                    "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000,
                                 "output_tokens_mean": 20}}],
        "teams": [{"name": "test", "keys": [hashed(TEST_KEY)]}],
        **in_process(tmp_path),
    }


def test_a_line_run_twice_with_one_id_is_billed_once(tmp_path: Path) -> None:
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}

    async def main() -> None:
        gw = await AppState.start(parse_config(config(tmp_path)))
        try:
            caller = gw.keyring.team("test")
            assert caller is not None
            line = f"batch_{uuid.uuid4().hex}-line-1"
            usages = set()
            for generation in range(1, 5):     # each run taken over from the last
                status, answer, _ = await run_line(gw, caller, CHAT_DOOR, body, request_id=line,
                                                   run_order=generation)
                assert status == 200
                last = orjson.loads(answer)["usage"]
                usages.add(last["completion_tokens"])
                report = await gw.budget.usage("test", None)
                assert [row["requests"] for row in report["ledger"]] == [1]
                assert report["spent_today_nanousd"] == cost_nanousd(
                    last["prompt_tokens"], last["completion_tokens"], 0.5, 1.0)  # batch: half price
                assert report["reserved_usd"] == 0
            assert len(usages) > 1   # the runs differed: the last one's bill replaced the first
            # A new line id is a new request, billed on its own.
            await run_line(gw, caller, CHAT_DOOR, body, request_id=line + "0", run_order=1)
            again = await gw.budget.usage("test", None)
            assert [row["requests"] for row in again["ledger"]] == [2]
        finally:
            await gw.aclose()

    asyncio.run(main())


def test_the_workers_runner_carries_the_runs_generation_into_the_bill(tmp_path: Path) -> None:
    """``line_runner`` (what the worker calls with a ``LineRun``): run 2's bill replaces
    run 1's, and run 1 running again after it (a stalled replica's retry) does not."""
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}

    async def main() -> None:
        gw = await AppState.start(parse_config(config(tmp_path)))
        try:
            owner = Owner("test", hashed(TEST_KEY))
            runner = line_runner(gw)
            line = f"batch_req_{uuid.uuid4().hex}"
            billed = []
            for generation in (1, 2, 1):
                answer = await runner(owner, "/v1/chat/completions", body,
                                      LineRun(line, generation))
                assert answer.status == 200
                usage = answer.body["usage"]
                billed.append(cost_nanousd(usage["prompt_tokens"], usage["completion_tokens"],
                                           0.5, 1.0))
            report = await gw.budget.usage("test", None)
            assert len(set(billed)) > 1       # the runs differed
            assert report["spent_today_nanousd"] == billed[1]
            assert [row["requests"] for row in report["ledger"]] == [1]
        finally:
            await gw.aclose()

    asyncio.run(main())


def test_a_runs_response_cache_hit_is_billed_as_that_run(tmp_path: Path) -> None:
    """A line's run 1 answers (a miss, kept in the team's response cache); its run 2
    is answered from that cache: run 2's answer is recorded, so its bill (half the
    original here) replaces run 1's, once (it was billed on top, as another request)."""
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 64, "temperature": 0}
    settings = config(tmp_path)
    settings["teams"][0]["response_cache"] = {"ttl_s": 60, "hit_price_fraction": 0.5}

    async def main() -> None:
        gw = await AppState.start(parse_config(settings))
        try:
            runner = line_runner(gw)
            owner = Owner("test", hashed(TEST_KEY))
            line = f"batch_req_{uuid.uuid4().hex}"
            first = await runner(owner, "/v1/chat/completions", body, LineRun(line, 1))
            usage = first.body["usage"]
            original = cost_nanousd(usage["prompt_tokens"], usage["completion_tokens"], 0.5, 1.0)
            assert (await gw.budget.usage("test", None))["spent_today_nanousd"] == original
            second = await runner(owner, "/v1/chat/completions", body, LineRun(line, 2))
            assert second.headers.get("x-routegate-cache") == "hit"
            report = await gw.budget.usage("test", None)
            assert report["spent_today_nanousd"] == round(original * 0.5)
            assert sum(row["requests"] for row in report["ledger"]) == 1
        finally:
            await gw.aclose()

    asyncio.run(main())
