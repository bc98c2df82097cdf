"""A replica frozen mid-batch (SIGSTOP) and resumed after the other took its lines over.

Two ``routegate serve`` replicas share only Redis, in front of a simulator slow
enough that a line takes about two seconds. One is frozen with lines in flight
until the other has taken them all over (past ``batch.claim_idle_s``, 2 s) and
run them again; by then its holds have lapsed too (``budget.reservation_ttl_s``,
2 s) and are billed what they had run up. Its upstream answers arrive while it
is frozen, so when it resumes it has them at once, and where the run that took a
line over is not done yet, the frozen one's answer is refused (in some runs; in
others every takeover records first: `refused late answers` says which; the
refusal itself is `tests/batch/test_line_runs.py`'s). Every line must end in the
output once, and
the team's spend must be what the output file's usage costs: the bill is the
recorded run's, whichever run recorded, settled or lapsed first (before each run
was numbered, the frozen replica's answers were recorded and the takeovers'
bills kept: 5 of 5 runs billed other than the output, e.g. 435,400 nano-USD
against 435,200).
"""

from __future__ import annotations

import io
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable

import redis

from loadtest.servers import run_simulator
from tests.gateway.test_batch_api import batch_config, billed, jsonl, lines_of, sdk, spent_nanousd
from tests.support import run_gateway

LINES = 24


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_frozen_replicas_late_answers_leave_the_bill_equal_to_the_output() -> None:
    with run_simulator("--tpot-ms", "25", "--prefill", "200000", "--output-mean", "80",
                       "--max-batch", "64") as slow_url:
        config = batch_config(slow_url, claim_idle_s=2, claim_interval_s=0.5)
        config["budget"] = {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}",
                            "reservation_ttl_s": 2}
        with run_gateway(config) as frozen, run_gateway(config) as other:
            client = sdk(other)
            upload = client.files.create(file=("requests.jsonl",
                                               io.BytesIO(jsonl(LINES, max_tokens=200))),
                                         purpose="batch")
            batch = client.batches.create(input_file_id=upload.id,
                                          endpoint="/v1/chat/completions",
                                          completion_window="24h")
            queue = redis.Redis.from_url("redis://127.0.0.1:6379/0")
            stream = config["batch"]["key_prefix"] + ":queue"
            mine = f"-{frozen.proc.pid}-".encode()

            def held_by_frozen() -> int:
                pending = queue.xpending(stream, "workers")
                return sum(c["pending"] for c in pending["consumers"] if mine in c["name"])

            _until(lambda: held_by_frozen() >= 2)       # it has lines in flight
            os.kill(frozen.proc.pid, signal.SIGSTOP)
            try:
                _until(lambda: held_by_frozen() == 0)   # the other took them all over
            finally:
                os.kill(frozen.proc.pid, signal.SIGCONT)
            queue.close()
            deadline = time.monotonic() + 120
            while (batch := client.batches.retrieve(batch.id)).status not in (
                    "completed", "failed", "expired", "cancelled"):
                assert time.monotonic() < deadline, batch
                time.sleep(0.1)
            assert batch.status == "completed", batch
            output = lines_of(client, batch.output_file_id)
            assert Counter(line["custom_id"] for line in output) == {
                f"r{i}": 1 for i in range(LINES)}
            assert "took over" in other.log()                  # the lines were run again
            # Some runs see the frozen replica's answers refused (a later run started);
            # in others every run that took over records first. Either order must
            # bill the recorded answer.
            print("refused late answers:", frozen.log().count("a later run of it started"))
            time.sleep(0.5)                                     # the frozen replica's last settles
            assert spent_nanousd(other) == billed(output)
            client_b = sdk(frozen)
            assert spent_nanousd(frozen) == billed(output)
            assert client_b.batches.retrieve(batch.id).status == "completed"
