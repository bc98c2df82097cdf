"""What a config file can be wrong about, said with its key path: the errors and the YAML loader.

    raise ConfigError(path, [("teams[0].keys[0]", KEY_HINT)])
    errors = schema_errors(validation_error)      # pydantic's, each once, at a readable path

``core/config.py`` loads and validates with these; they know nothing of the
schema itself.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import ValidationError


class ConfigError(Exception):
    """A config file that cannot be used; ``errors`` lists (key path, message)."""

    def __init__(self, path: str, errors: list[tuple[str, str]]) -> None:
        self.path = path
        self.errors = errors
        lines = "\n".join(f"  {path}: {loc}: {msg}" for loc, msg in errors)
        super().__init__(f"invalid config {path}:\n{lines}")


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "constrained-str", "KeyConfig",
                      "function-after[_backend_fields(), ModelConfig]"):
            continue  # pydantic's union/validator branch names are noise to a config author
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


KEY_HINT = ("a key must be written in its sha256 form, never as plaintext: run "
            "`routegate hash-key <key>` and paste what it prints (sha256:<64 hex digits>)")


def schema_errors(exc: ValidationError) -> list[tuple[str, str]]:
    """Each error once, at its key path; a plaintext team key gets how to hash it
    (pydantic reports it once per branch of ``str | KeyConfig``)."""
    out: list[tuple[str, str]] = []
    for e in exc.errors():
        loc = _key_path(e["loc"])
        if re.fullmatch(r"teams\[\d+\]\.keys\[\d+\]", loc):
            msg = KEY_HINT
        else:
            msg = e["msg"]
        if (loc, msg) not in out:
            out.append((loc, msg))
    return out


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key written twice in one mapping is
    an error: by default the later one silently wins, hiding a typo'd edit."""

    duplicates: list[str]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` keys are meant to be overridden
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                first = seen[key].start_mark.line + 1
                self.duplicates.append(f"duplicate key {key!r} (first written on line {first})"
                                       f"{key_node.start_mark}")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)
