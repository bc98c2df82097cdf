"""A Redis restart mid-batch: the batch resumes and every line is written exactly once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import openai

from tests.budget.servers import RedisServer
from tests.gateway.test_batch_api import TERMINAL, batch_config, jsonl, lines_of, sdk, submit
from tests.support import run_gateway


def test_redis_restart_mid_batch(sim_url: str, tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        config = {**batch_config(sim_url), "redis_url": server.url}
        with run_gateway(config) as gw:
            client = sdk(gw)
            batch = submit(client, jsonl(200))
            while client.batches.retrieve(batch.id).request_counts.completed < 30:  # type: ignore[union-attr]
                time.sleep(0.02)
            server.kill()  # SIGKILL; the AOF is fsynced on every write
            time.sleep(1.5)
            server.start()
            deadline = time.monotonic() + 90
            while True:
                try:
                    batch = client.batches.retrieve(batch.id)
                except openai.APIError:
                    batch = None  # the gateway's own Redis connections are reconnecting
                if batch is not None and batch.status in TERMINAL:
                    break
                assert time.monotonic() < deadline, f"batch stuck: {batch}"
                time.sleep(0.2)
            assert batch.status == "completed"
            output = lines_of(client, batch.output_file_id)
            errors = lines_of(client, batch.error_file_id)
            assert Counter(line["custom_id"] for line in output + errors) == {
                f"r{i}": 1 for i in range(200)}
            assert batch.request_counts is not None and batch.request_counts.total == 200
