"""Config validation and the CLI's config commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.config import ConfigError, load_config
from tests.support import REPO, child_env


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def model(**kw: object) -> dict:
    return {"name": "m", "price": {"input_per_mtok": 1, "output_per_mtok": 1}, **kw}


def test_shipped_config_is_valid() -> None:
    config = load_config(REPO / "config" / "routegate.yaml")
    assert len(config.models) == 3
    assert len({m.price.input_per_mtok for m in config.models}) == 3


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
