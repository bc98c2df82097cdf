"""The worked configs in the README and docs/providers/ are configs routegate accepts.

A config an operator copies from the docs must pass the schema and build its
backends; the README's must also have check-config name its unset keys.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from core.config import parse_config
from gateway.observe.startup import key_notes
from gateway.upstreams import build_backends
from tests.support import REPO

TEAM = {"name": "t", "keys": ["sha256:" + "0" * 64]}


def yaml_blocks(path: Path, after: str = "") -> list[dict]:
    text = path.read_text()
    text = text[text.index(after):] if after else text
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    return [b for b in blocks if isinstance(b, dict) and "models" in b]


def test_the_readme_configs_for_real_models_are_valid_and_name_unset_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    block = yaml_blocks(REPO / "README.md", "## In front of real models")[0]
    config = parse_config({**block, "teams": [TEAM]})
    assert {m.backend for m in config.models} == {"openai_compat", "anthropic", "azure_openai",
                                                 "bedrock"}
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_KEY"):
        monkeypatch.delenv(name, raising=False)
    notes = key_notes(config)
    assert len(notes) == 3 and all("502 upstream_auth" in n for n in notes), notes
    assert set(build_backends(config)) == {m.name for m in config.models}


@pytest.mark.parametrize("page", ["anthropic", "azure", "bedrock"])
def test_each_provider_page_config_is_valid(page: str) -> None:
    blocks = yaml_blocks(REPO / "docs" / "providers" / f"{page}.md")
    assert blocks
    for block in blocks:
        config = parse_config({**block, "teams": [TEAM]})
        assert set(build_backends(config)) == {m.name for m in config.models}
