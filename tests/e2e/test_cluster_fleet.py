"""Everything that lives in Redis, on a real 3-master Redis Cluster: two gateway
replicas on separate working directories sharing only the cluster.

The budgets already had their cluster test (tests/budget/test_cluster.py);
here the rest: the Batch API's files (bytes in the redis blob store),
metadata and stream, the shared breakers, the /ui session and the admin
throttle, and the labels from traffic (feedback). Keys spread over the
nodes by their hash tags (per team, per batch, per blob).
"""

from __future__ import annotations

import io
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import openai
import pytest
from redis.cluster import RedisCluster

from tests.budget.servers import RedisClusterNodes
from tests.gateway.test_batch_api import batch_config, jsonl, lines_of, sdk, wait
from tests.support import OTHER_KEY, run_gateway

ADMIN_KEY = "sk-admin-cluster-test-0123456789"
ASK = [{"role": "user", "content": "hello"}]


@pytest.mark.timeout(180)
def test_batches_files_breakers_and_sessions_on_a_cluster(sim_url: str, tmp_path: Path) -> None:
    upstream = f"sequence-500.500.500.500-{uuid.uuid4().hex[:8]}"
    with RedisClusterNodes(tmp_path / "cluster") as nodes:
        config = batch_config(sim_url)
        config["redis_url"] = nodes.url
        config["models"].append({"name": "shaky", "backend": "openai_compat",
                                 "base_url": sim_url, "upstream_model": upstream,
                                 "price": {"input_per_mtok": 0.01, "output_per_mtok": 0.01}})
        config["breaker"] = {"consecutive_failures": 2, "cooldown_s": 30}
        config["teams"][0]["feedback"] = True
        env = {"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}
        with run_gateway(config, env=env) as a, run_gateway(config, env=env) as b:
            # Files and a batch: uploaded through A, run by both, read through B.
            upload = sdk(a).files.create(file=("r.jsonl", io.BytesIO(jsonl(40))),
                                         purpose="batch")
            batch = sdk(b).batches.create(input_file_id=upload.id,
                                          endpoint="/v1/chat/completions",
                                          completion_window="24h")
            batch = wait(sdk(b), batch.id, timeout=60)
            assert batch.status == "completed", batch
            output = lines_of(sdk(a), batch.output_file_id)
            assert Counter(line["custom_id"] for line in output) == {f"r{i}": 1 for i in range(40)}
            with pytest.raises(openai.NotFoundError):
                sdk(b, OTHER_KEY).files.content(upload.id)
            # A breaker opened on A holds the model out on B.
            for _ in range(2):
                httpx.post(a.base_url + "/chat/completions", timeout=10,
                           headers={"authorization": "Bearer sk-test-key"},
                           json={"model": "shaky", "messages": ASK})
            deadline = time.monotonic() + 2
            while httpx.get(b.url + "/readyz").json()["breakers"]["shaky"] != "open":
                assert time.monotonic() < deadline, "B never saw A's open breaker"
                time.sleep(0.05)
            # Feedback through B on an answer A gave: one label, in the team's slot.
            answer = httpx.post(a.base_url + "/chat/completions", timeout=10, json={
                "model": "fast", "messages": ASK}, headers={"authorization": "Bearer sk-test-key"})
            rid = answer.headers["x-routegate-request-id"]
            for score, status in ((1, 200), (0, 409)):
                given = httpx.post(b.base_url + "/feedback", timeout=10,
                                   json={"request_id": rid, "score": score},
                                   headers={"authorization": "Bearer sk-test-key"})
                assert given.status_code == status, given.text
            # A /ui session made on A opens B's operator API.
            login = httpx.post(a.url + "/ui/login", data={"key": ADMIN_KEY})
            sid = login.cookies["routegate_ui"]
            assert httpx.get(b.url + "/admin/overview",
                             cookies={"routegate_ui": sid}).status_code == 200
            assert httpx.get(b.url + "/admin/overview",
                             cookies={"routegate_ui": "forged"}).status_code == 401
            assert "Traceback" not in a.log() + b.log()
        # The keys really are spread over the cluster's nodes.
        client = RedisCluster.from_url(nodes.url.replace("redis+cluster://", "redis://"))
        prefix = config["batch"]["key_prefix"]
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        assert keys and len({client.keyslot(k) for k in keys}) > 3
        labels = config["budget"]["key_prefix"] + ":{lab:test}:labels"
        entries = client.xrange(labels)
        assert entries is not None
        assert [None if fields is None else fields[b"rid"] for _, fields in entries] == [rid.encode()]
        client.close()
