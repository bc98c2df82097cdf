"""API keys: stored only as ``sha256:<hex>``, looked up in one dict.

    ring = KeyRing.from_config(config)
    caller = ring.authenticate("Bearer sk-routegate-demo")   # -> Caller or AuthenticationFailed
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from core.config import GatewayConfig, KeyConfig, TeamConfig
from core.errors import AuthenticationFailed


def hash_key(key: str) -> str:
    """The form keys take in config: ``routegate hash-key KEY`` prints it."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    team: TeamConfig
    key: KeyConfig

    @property
    def key_id(self) -> str:
        """A short, non-secret name for the key (for logs and per-key limits)."""
        return self.key.name or self.key.hash[7:19]


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class KeyRing:
    def __init__(self, callers: dict[str, Caller]) -> None:
        self._callers = callers

    @classmethod
    def from_config(cls, config: GatewayConfig) -> KeyRing:
        return cls({k.hash: Caller(team, k) for team in config.teams for k in team.key_configs()})

    def team(self, name: str) -> Caller | None:
        """Any caller of the team ``name`` (for admin look-ups)."""
        return next((c for c in self._callers.values() if c.team.name == name), None)

    def lookup(self, team: str, key_hash: str) -> Caller | None:
        """The caller whose key hashes to ``key_hash``, if it still belongs to ``team``
        (batch workers run each line as the key that created the batch)."""
        caller = self._callers.get(key_hash)
        return caller if caller is not None and caller.team.name == team else None

    def authenticate(self, authorization: str | None) -> Caller:
        token = bearer_token(authorization)
        if token is None:
            raise AuthenticationFailed(
                "Missing API key. Send it as 'Authorization: Bearer <key>'.", code="missing_api_key")
        caller = self._callers.get(hash_key(token))
        if caller is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        return caller


def admin_key_matches(config: GatewayConfig, authorization: str | None) -> bool:
    expected = os.environ.get(config.admin_key_env)
    token = bearer_token(authorization)
    if not expected or token is None:
        return False
    return hmac.compare_digest(token.encode(), expected.encode())
