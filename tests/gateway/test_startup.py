"""Issue 21: safe defaults, and a start-up block that says where the gateway listens and
what is unsafe."""

from __future__ import annotations

import subprocess
import sys

import yaml

from core.config import parse_config
from tests.support import REPO, base_config, child_env, run_gateway


def test_a_config_without_routing_routes_by_quality_and_slo() -> None:
    config = parse_config({"models": [{"name": "m", "price": {"input_per_mtok": 1,
                                                              "output_per_mtok": 1}}]})
    assert config.routing.auto_policy == "slo_aware"


def test_the_start_up_block_names_the_address_and_every_unsafe_setting(sim_url: str) -> None:
    with run_gateway(base_config(sim_url)) as gw:       # no admin key, cheapest, open /metrics
        log = gw.log()
    port = gw.url.rsplit(":", 1)[1]
    assert f"routegate ready on http://127.0.0.1:{port}" in log
    block = log[log.index("routegate ready on"):]
    for shown in ("models: fast (chat, openai_compat x1, interactive+batch, $0.2/$0.4 per Mtok)",
                  "routing: auto -> cheapest", "redis: redis://127.0.0.1:6379/0",
                  "batch: file bytes in the redis blob store", "labels: on",
                  "/ui history: the last 60 minutes per minute in Redis"):
        assert shown in block, shown
    warned = [line for line in log.splitlines() if " WARNING routegate.startup " in line]
    assert any("ROUTEGATE_ADMIN_KEY is not set" in line for line in warned)
    assert any("/metrics is open" in line for line in warned)
    assert any("auto_policy is cheapest" in line for line in warned)


def test_a_safe_config_warns_about_nothing(sim_url: str) -> None:
    config = base_config(sim_url, routing={"auto_policy": "slo_aware"},
                         metrics={"require_admin_key": True})
    config["teams"][0]["quality"] = 0.5      # a target its models' abilities reach
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": "k" * 32}) as gw:
        log = gw.log()
    assert "routing: auto -> slo_aware" in log
    assert " WARNING routegate.startup " not in log


def test_check_config_names_the_default_policy(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"models": [{"name": "m", "price": {
        "input_per_mtok": 1, "output_per_mtok": 1}}]}))
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)],
                         cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "auto policy slo_aware" in run.stdout


def test_check_config_reports_every_error_in_one_run(tmp_path) -> None:
    config = base_config("http://127.0.0.1:9/v1", routing={"auto_policy": "nosuch"})
    config["teams"][0]["keys"] = ["sk-plaintext-key"]
    config["models"][0]["price"]["input_per_mtok"] = float("inf")
    text = yaml.safe_dump(config, sort_keys=False).replace(
        "  quality: 0.8\n", "  quality: 0.8\n  quality: 0.9\n", 1)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)],
                         cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith(f"  {path}: ")]
    found = {line.split(": ")[1] for line in errors}
    assert found == {"(yaml)", "routing.auto_policy", "teams[0].keys[0]",
                     "models[0].price.input_per_mtok"}, run.stderr
    key_line = next(line for line in errors if "teams[0].keys[0]" in line)
    assert "routegate hash-key" in key_line and "constrained-str" not in key_line
    assert len(errors) == 4


def test_readyz_is_degraded_while_each_pool_is_served_and_503_when_one_is_not(
        sim_url: str) -> None:
    import httpx

    price = {"input_per_mtok": 1, "output_per_mtok": 1}
    dead = "http://127.0.0.1:9/v1"                       # nothing listens there
    config = base_config(sim_url)
    config["models"] = [
        {"name": "up", "backend": "openai_compat", "base_url": sim_url, "price": price},
        {"name": "down", "backend": "openai_compat", "base_url": dead, "price": price},
        {"name": "batch-only", "backend": "openai_compat", "base_url": dead, "price": price,
         "pools": ["batch"]}]
    config["teams"] = [{"name": "t", "keys": [config["teams"][0]["keys"][0]]}]
    with run_gateway(config) as gw:
        ready = httpx.get(gw.url + "/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "degraded" and body["pools"] == {"interactive": True, "batch": True}
    assert body["upstreams"] == {"up": True, "down": False, "batch-only": False}
    config["models"] = config["models"][1:]           # no interactive model answers
    with run_gateway(config) as gw:
        ready = httpx.get(gw.url + "/readyz")
    assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
    assert ready.json()["pools"] == {"interactive": False, "batch": False}


def test_check_config_names_an_unset_key_and_a_target_only_a_dear_model_reaches(tmp_path) -> None:
    """Issue 49: an unset api_key_env passed as `ok` and failed on the first request; a
    target of 0.6 over `tiny` at 0.5 sent everything to the model 20x dearer, unsaid."""
    def model(name: str, ability: float, price: float) -> dict:
        return {"name": name, "backend": "openai_compat", "base_url": "http://127.0.0.1:9/v1",
                "api_key_env": "ROUTEGATE_TEST_UNSET_KEY", "ability": ability,
                "price": {"input_per_mtok": price, "output_per_mtok": price}}
    config = base_config("http://127.0.0.1:9/v1")
    config["models"] = [model("tiny", 0.5, 0.1), model("big", 0.7, 2.0)]
    config["teams"] = [{**config["teams"][0], "quality": 0.6}]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in child_env().items() if k != "ROUTEGATE_TEST_UNSET_KEY"}
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    warned = [line for line in run.stdout.splitlines() if line.startswith("  warning: ")]
    assert any("model tiny: ROUTEGATE_TEST_UNSET_KEY" in w and "upstream_auth" in w for w in warned)
    assert any("only big and dearer reach its quality 0.6" in w and "20x" in w for w in warned)
    config["teams"][0]["quality"] = 0.45
    path.write_text(yaml.safe_dump(config))
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)],
                         cwd=REPO, env={**env, "ROUTEGATE_TEST_UNSET_KEY": "sk-x"},
                         capture_output=True, text=True, timeout=60)
    assert "warning" not in run.stdout, run.stdout
