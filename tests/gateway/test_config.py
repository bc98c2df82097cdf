"""Config validation and the CLI's config commands."""

from __future__ import annotations

import math
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from core.config import ConfigError, GatewayConfig, load_config, parse_config
from core.strict import Strict
from gateway.reload import needs_restart
from tests.support import REPO, base_config, child_env, free_port, run_gateway


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def model(**kw: object) -> dict:
    return {"name": "m", "price": {"input_per_mtok": 1, "output_per_mtok": 1}, **kw}


def test_shipped_config_is_valid() -> None:
    config = load_config(REPO / "config" / "routegate.yaml")
    chat = [m for m in config.models if m.kind == "chat"]
    assert len(chat) == 3 and len({m.price.input_per_mtok for m in chat}) == 3
    (embed,) = [m for m in config.models if m.kind == "embedding"]
    assert "embed" in embed.name and "text-embedding-3-small" in embed.aliases
    assert config.model("gpt-4o-mini") is not None and config.model("claude-sonnet-4-5")


@pytest.mark.parametrize("data, where", [
    ({"models": [model(pricee=1)]}, "models[0].pricee"),
    ({"models": [model(price={"input_per_mtok": -1, "output_per_mtok": 1})]},
     "models[0].price.input_per_mtok"),
    ({"models": [model(backend="openai_compat")]}, "models[0]"),
    ({"models": [model()], "teams": [{"name": "t", "keys": ["plaintext-key"]}]}, "teams[0].keys[0]"),
    ({"models": [model()], "teams": [{"name": "t", "keys": ["sha256:" + "0" * 64],
                                      "allowed_models": ["ghost"]}]}, "(root)"),
    ({"models": [model()], "budget": {"timezone": "Mars/Olympus"}}, "budget.timezone"),
])
def test_errors_name_the_key_path(tmp_path: Path, data: object, where: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    assert any(loc.startswith(where) for loc, _ in info.value.errors), info.value.errors


def test_check_config_cli_prints_every_error(tmp_path: Path) -> None:
    path = write(tmp_path, {"models": [model(pricee=1, context_window="big")], "bogus": 1})
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)],
                            capture_output=True, text=True, env=child_env(), cwd=REPO)
    assert result.returncode != 0
    for key in ("models[0].pricee", "models[0].context_window", "bogus"):
        assert f"{path}: {key}" in result.stderr


def test_check_config_cli_accepts_the_shipped_file() -> None:
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config"],
                            capture_output=True, text=True, env=child_env(), cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_hash_key_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "hash-key", "sk-routegate-demo"],
                            capture_output=True, text=True, env=child_env(), cwd=REPO)
    assert result.stdout.strip() == (
        "sha256:35aee8dcc59cfa34543e4fe31f2a8ed9df05d1f098696ed9caf53f576abb3e0e")


# --- check-config catches everything serve would fail on (issue 7, item 5) ---

UNUSED_URL = "http://127.0.0.1:9/v1"  # never contacted: these configs must fail first


def _broken(change: str) -> str:
    """The YAML text of a valid gateway config with one defect."""
    config = base_config(UNUSED_URL)
    if change == "policy":
        config["routing"] = {"auto_policy": "nosuch"}
    elif change == "fixed-without-model":
        config["routing"] = {"auto_policy": "fixed"}
    elif change == "ftp":
        config["models"][0]["base_url"] = "ftp://x"
    elif change == "no-host":
        config["models"][1]["base_url"] = ["http://127.0.0.1:9/v1", "https:///v1"]
    elif change == "inf-limit":
        config["teams"][0]["budget"] = {"daily_hard_usd": float("inf")}
    elif change == "nan-price":
        config["models"][0]["price"]["input_per_mtok"] = float("nan")
    elif change == "inf-timeout":
        config["models"][0]["timeouts"] = {"first_byte_s": float("inf")}
    elif change == "tokenizer":
        config["models"][0]["tokenizer"] = "nosuch_base"
    elif change == "classifier-missing":
        config["teams"][0]["classifier"] = "/nonexistent/learned"
    elif change == "classifier-foreign":
        config["routing"] = {"classifier": str(REPO / "README.md")}   # not an artifact
    text = yaml.safe_dump(config, sort_keys=False)
    if change == "duplicate":
        text = text.replace("  quality: 0.8\n", "  quality: 0.8\n  quality: 0.9\n", 1)
    return text


BROKEN = [
    ("policy", "routing.auto_policy", "nosuch"),
    ("fixed-without-model", "routing.auto_policy", "fixed_model"),
    ("ftp", "models[0].base_url", "ftp://x"),
    ("no-host", "models[1].base_url", "https:///v1"),
    ("inf-limit", "teams[0].budget.daily_hard_usd", "finite"),
    ("nan-price", "models[0].price.input_per_mtok", "finite"),
    ("inf-timeout", "models[0].timeouts.first_byte_s", "finite"),
    ("tokenizer", "models[0].tokenizer", "nosuch_base"),
    ("duplicate", "(yaml)", "duplicate key 'quality'"),
    ("classifier-missing", "teams[0].classifier", "no classifier artifact there"),
    ("classifier-foreign", "routing.classifier", "not a usable routegate classifier artifact"),
]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True,
                          text=True, env=child_env(), cwd=REPO, timeout=60)


def test_the_base_of_the_broken_configs_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(_broken("none"))
    result = _cli("check-config", str(path))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("change, key, detail", BROKEN, ids=[b[0] for b in BROKEN])
def test_check_config_refuses_what_serve_would_fail_on(tmp_path: Path, change: str, key: str,
                                                       detail: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_broken(change))
    result = _cli("check-config", str(path))
    assert result.returncode == 2, result.stdout
    line = next((x for x in result.stderr.splitlines() if f"{path}: {key}:" in x), None)
    assert line is not None and detail in line, result.stderr


@pytest.mark.parametrize("change, key", [("policy", "routing.auto_policy"),
                                         ("inf-limit", "teams[0].budget.daily_hard_usd"),
                                         ("duplicate", "(yaml)"),
                                         ("classifier-missing", "teams[0].classifier")])
def test_serve_fails_fast_on_the_same_errors(tmp_path: Path, change: str, key: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_broken(change))
    result = _cli("serve", "--config", str(path), "--port", str(free_port()))
    assert result.returncode == 2
    assert f"{path}: {key}:" in result.stderr


def test_duplicate_keys_name_both_lines_at_any_depth(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("models:\n  - name: m\n    price:\n      input_per_mtok: 1\n"
                    "      output_per_mtok: 1\n      input_per_mtok: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (loc, msg), = info.value.errors
    assert loc == "(yaml)" and "duplicate key 'input_per_mtok'" in msg
    assert "line 4" in msg and "line 6" in msg, msg


def test_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("x-price: &p {input_per_mtok: 1, output_per_mtok: 1}\n"
                    "models:\n  - name: m\n    price:\n      <<: *p\n      input_per_mtok: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [loc for loc, _ in info.value.errors] == ["x-price"]  # only the unknown section


# --- one Strict base for every section; reload names what needs a restart (issue 20) ---

def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def reachable_models(root: type[BaseModel]) -> set[type[BaseModel]]:
    """Every pydantic model a config file can reach from ``root``, however nested."""
    seen: set[type[BaseModel]] = set()
    stack = [root]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            for field in current.model_fields.values():
                stack.extend(_models_in(field.annotation))
    return seen


def _float_fields(section: type[BaseModel]) -> list[str]:
    def has_float(annotation: object) -> bool:
        return annotation is float or any(has_float(a) for a in typing.get_args(annotation))
    return [name for name, f in section.model_fields.items() if has_float(f.annotation)]


SECTIONS = sorted(reachable_models(GatewayConfig), key=lambda m: m.__name__)


def test_the_walk_reaches_every_section() -> None:
    names = {m.__name__ for m in SECTIONS}
    assert {"EscalationConfig", "BreakerConfig", "BatchSettings", "BudgetSettings", "Limits",
            "SchedulerConfig", "OtelConfig", "KeyConfig", "Timeouts", "LoggingConfig"} <= names


@pytest.mark.parametrize("section", SECTIONS, ids=[m.__name__ for m in SECTIONS])
def test_every_section_forbids_extras_and_non_finite_numbers(section: type[BaseModel]) -> None:
    assert issubclass(section, Strict)
    assert section.model_config.get("extra") == "forbid"
    assert section.model_config.get("allow_inf_nan") is False
    with pytest.raises(ValidationError) as info:
        section.model_validate({"surely_not_a_key": 1})
    assert any(e["type"] == "extra_forbidden" for e in info.value.errors())
    for name in _float_fields(section):
        for bad in (math.inf, -math.inf, math.nan):
            with pytest.raises(ValidationError) as info:
                section.model_validate({name: bad})
            assert any(e["loc"][0] == name and e["type"] == "finite_number"
                       for e in info.value.errors()), (name, bad, info.value.errors())


@pytest.mark.parametrize("section, key", [("escalation", "deadline_s"), ("breaker", "cooldown_s"),
                                          ("breaker", "max_rest_s"), ("batch", "retry_backoff_s")])
def test_inf_in_the_yaml_is_refused_in_every_section(tmp_path: Path, section: str, key: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"models": [model()]}) + f"{section}:\n  {key}: .inf\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [loc for loc, _ in info.value.errors] == [f"{section}.{key}"], info.value.errors


def test_an_unknown_ladder_name_is_a_config_error() -> None:
    models = [model(name="small"), model(name="large")]
    parse_config({"models": models, "escalation": {"ladder": ["small", "large"]}})
    with pytest.raises(ConfigError) as info:
        parse_config({"models": models, "escalation": {"ladder": ["small", "lage", "large"]}})
    (loc, msg), = info.value.errors
    assert loc == "(root)" and "escalation.ladder" in msg and "'lage'" in msg, msg


# One change to every top-level key: a key added to GatewayConfig later must be added
# here too, and reload then reports it without anyone writing it into a list.
EVERY_KEY_CHANGED = {
    "models": [model(context_window=4096)], "pools": {"batch": {"price_multiplier": 0.4}},
    "teams": [{"name": "t", "keys": ["sha256:" + "1" * 64]}], "routing": {"fallback": False},
    "escalation": {"deadline_s": 30}, "breaker": {"cooldown_s": 2},
    "budget": {"timezone": "Europe/Paris"}, "batch": {"concurrency": 2},
    "admin_key_env": "OTHER_ADMIN_KEY", "redis_url": "redis://127.0.0.1:1/0", "data_dir": "/nowhere",
    "max_body_bytes": 4096, "metrics": {"enabled": False}, "logging": {"prompts": True},
    "otel": {"endpoint": "http://127.0.0.1:4318"},
    "responses": {"store_ttl_s": 7200}, "learning": {"keep_days": 7},
    "max_body_objects": 500, "storage": {"redis_url": "redis://127.0.0.1:2/0"},
}


def test_reload_names_every_section_it_did_not_apply() -> None:
    assert set(EVERY_KEY_CHANGED) == set(GatewayConfig.model_fields)
    running = parse_config({"models": [model()]})
    assert needs_restart(running, running) == []
    new = parse_config(EVERY_KEY_CHANGED)
    assert needs_restart(running, new) == [n for n in GatewayConfig.model_fields if n != "teams"]
    only_teams = running.model_copy(update={"teams": new.teams})
    assert needs_restart(running, only_teams) == []


def test_a_live_reload_warns_about_what_it_did_not_apply(sim_url: str) -> None:
    admin = {"authorization": "Bearer sk-admin-reload"}
    with run_gateway(base_config(sim_url), env={"ROUTEGATE_ADMIN_KEY": "sk-admin-reload"}) as gw:
        config = yaml.safe_load(gw.config_path.read_text())
        config["breaker"] = {"cooldown_s": 2}
        config["escalation"] = {"deadline_s": 30}
        config["max_body_bytes"] = 4096
        config["teams"][0]["quality"] = 0.7
        gw.config_path.write_text(yaml.safe_dump(config))
        r = httpx.post(gw.url + "/admin/reload", headers=admin)
        assert r.status_code == 200
        body = r.json()
        assert body["reloaded"] is True
        assert body["needs_restart"] == ["escalation", "breaker", "max_body_bytes"]
        warned = [line for line in gw.log().splitlines() if "restart to apply" in line]
        assert warned and " WARNING routegate.reload " in warned[0]
        assert "escalation, breaker, max_body_bytes" in warned[0]
